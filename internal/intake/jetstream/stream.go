package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/message"
)

// StreamHeaderAllowance is the room a stream the worker creates leaves for
// a message's NATS headers (Nats-Msg-Id, Nats-Expected-Stream, traceparent,
// tracestate) on top of message.MaxSize: the server counts headers and
// payload together against a stream's MaxMsgSize.
const StreamHeaderAllowance = 4 << 10

// MaxStreamMsgSize is the MaxMsgSize of the streams the worker creates:
// the intake's message limit (message.MaxSize) plus the header allowance.
// The broker then refuses a larger publish outright, so that neither the
// stream nor the consumer ever holds a message the intake would only
// quarantine as too_large.
const MaxStreamMsgSize = message.MaxSize + StreamHeaderAllowance

// StreamSpec describes a stream EnsureStream creates when it is missing.
type StreamSpec struct {
	// Name of the stream.
	Name string
	// Subjects the stream captures.
	Subjects []string
	// Duplicates is the publish deduplication window (Nats-Msg-Id).
	// Default DefaultDuplicateWindow.
	Duplicates time.Duration
	// MaxAge drops messages older than this; 0 keeps them. The worker sets
	// it to the retention, so that a replay of the stream (a new consumer,
	// or a reset one) never meets a message whose record was pruned.
	MaxAge time.Duration
	// MaxMsgSize is the largest message (headers and payload) the stream
	// stores. Default MaxStreamMsgSize; -1: none of its own (the server's
	// max_payload still applies).
	MaxMsgSize int32
	// Replicas is the stream's replica count on a cluster. Default 1.
	Replicas int
}

// EnsureStream returns the stream spec.Name, creating it from spec when it
// does not exist. An existing stream is left as it is: streams are often
// owned by whoever runs the broker.
func EnsureStream(ctx context.Context, js natsjs.JetStream, spec StreamSpec) (s natsjs.Stream, created bool, err error) {
	s, err = js.Stream(ctx, spec.Name)
	if err == nil {
		return s, false, nil
	}
	if !errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, false, fmt.Errorf("stream %s: %w", spec.Name, err)
	}
	if spec.Duplicates <= 0 {
		spec.Duplicates = DefaultDuplicateWindow
	}
	if spec.MaxMsgSize == 0 {
		spec.MaxMsgSize = MaxStreamMsgSize
	}
	s, err = js.CreateStream(ctx, natsjs.StreamConfig{
		Name:       spec.Name,
		Subjects:   spec.Subjects,
		Storage:    natsjs.FileStorage,
		Retention:  natsjs.LimitsPolicy,
		Duplicates: spec.Duplicates,
		MaxAge:     spec.MaxAge,
		MaxMsgSize: spec.MaxMsgSize,
		Replicas:   spec.Replicas,
	})
	if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
		// Another worker created it a moment ago.
		s, err = js.Stream(ctx, spec.Name)
		return s, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("create stream %s: %w", spec.Name, err)
	}
	return s, true, nil
}

// EnsureStreams ensures each stream of specs (EnsureStream) and logs what it
// found: a created stream at info; an existing one, which is the broker
// owner's and never changed, at warn when it keeps messages longer than
// spec.MaxAge (a replay through a new consumer would then run messages whose
// records were pruned) or stores messages larger than MaxStreamMsgSize.
func EnsureStreams(ctx context.Context, js natsjs.JetStream, logger *slog.Logger, specs ...StreamSpec) error {
	for _, spec := range specs {
		s, created, err := EnsureStream(ctx, js, spec)
		if err != nil {
			return err
		}
		if created {
			logger.Info("created stream", "stream", spec.Name, "subjects", spec.Subjects, "max_age", spec.MaxAge.String(),
				"max_msg_size", MaxStreamMsgSize)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			continue
		}
		if info.Config.MaxAge == 0 || info.Config.MaxAge > spec.MaxAge {
			logger.Warn("stream keeps messages longer than the retention: replaying it through a new consumer would run messages whose records were pruned",
				"stream", spec.Name, "max_age", info.Config.MaxAge.String(), "retention", spec.MaxAge.String())
		}
		if LooseMessageLimit(info.Config) {
			logger.Warn("stream stores messages larger than the intake accepts: an oversized one is delivered and quarantined as too_large (size, SHA-256, first 1 KiB) instead of being refused by the broker; set the stream's max_msg_size",
				"stream", spec.Name, "max_msg_size", info.Config.MaxMsgSize, "limit", MaxStreamMsgSize)
		}
	}
	return nil
}

// LooseMessageLimit reports whether a stream configured as c stores
// messages larger than MaxStreamMsgSize, or has no size limit of its own.
// EnsureStream leaves such an existing stream as it is (it is the broker
// owner's); the worker warns about it, since an oversized message then
// reaches the consumer, which quarantines it as too_large by its size,
// digest and first bytes.
func LooseMessageLimit(c natsjs.StreamConfig) bool {
	return c.MaxMsgSize <= 0 || c.MaxMsgSize > MaxStreamMsgSize
}

// PublishSubject returns the subject a message of type typ is published on
// under the consumer's subject filter: "effectively.messages.>" and
// "order.placed" give "effectively.messages.order.placed"; a filter without
// wildcards is itself the subject.
func PublishSubject(filter, typ string) (string, error) {
	if err := validSubject(filter, true); err != nil {
		return "", err
	}
	if !strings.ContainsAny(filter, "*>") {
		return filter, nil
	}
	prefix, ok := strings.CutSuffix(filter, ".>")
	if !ok || strings.Contains(prefix, "*") {
		return "", fmt.Errorf("subject filter %q: only a filter ending in .> (or none) names a subject to publish on", filter)
	}
	if typ == "" {
		typ = "unknown"
	}
	subject := prefix + "." + typ
	if err := validSubject(subject, false); err != nil {
		return "", fmt.Errorf("message type %q: %w", typ, err)
	}
	return subject, nil
}

// MsgID is the Nats-Msg-Id a message is published with: its ID and a short
// hash of its canonical content. The broker then drops an identical copy
// published within the duplicate window, but lets a different payload under
// the same ID through, so the inbox can quarantine it as a payload mismatch
// instead of the broker silently dropping it.
func MsgID(m *message.Message) string {
	return m.ID + "#" + m.Hash()[:16]
}

// validSubject checks a NATS subject (or, with wildcards, a filter).
func validSubject(s string, wildcards bool) error {
	if s == "" {
		return errors.New("subject is empty")
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token", s)
		case strings.ContainsAny(t, " \t\r\n"):
			return fmt.Errorf("subject %q contains white space", s)
		case (t == "*" || t == ">") && !wildcards:
			return fmt.Errorf("subject %q contains a wildcard", s)
		case t == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q: '>' must be the last token", s)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q: wildcards must be whole tokens", s)
		}
	}
	return nil
}
