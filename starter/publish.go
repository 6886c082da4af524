package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Statuses of a published message.
const (
	pubStored    = "published"
	pubDuplicate = "duplicate"
)

// publishResult is the JSON line printed per message.
type publishResult struct {
	Line      int    `json:"line"`
	MessageID string `json:"message_id,omitempty"`
	Subject   string `json:"subject"`
	MsgID     string `json:"nats_msg_id,omitempty"`
	Stream    string `json:"stream"`
	Sequence  uint64 `json:"seq"`
	// Status is published (stored by the stream) or duplicate (dropped by
	// the broker's duplicate window: an identical copy was published before).
	Status string `json:"status"`
	// Invalid is set when the message does not decode; it is published
	// anyway, and the worker quarantines it with this reason.
	Invalid string `json:"invalid,omitempty"`
}

// cmdPublish puts each message of a file or stdin on the JetStream subject
// the worker consumes, for the worker to record and start.
func cmdPublish(ctx context.Context, cfg config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	broker, args, err := brokerFlag(cfg, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 1 {
		return exitUsage, fmt.Errorf("%w: publish takes one argument, a file or -", errUsage)
	}
	if broker == brokerKafka {
		return publishKafka(ctx, cfg, args[0], stdin, stdout, stderr)
	}
	if !cfg.NATS.Enabled() {
		return exitUsage, fmt.Errorf("%w: NATS_URL is off; publish needs a broker", errUsage)
	}
	r, size, closeInput, err := openInput(args[0], stdin)
	if err != nil {
		return exitError, err
	}
	defer closeInput()

	nc, err := cfg.NATS.Connect("effectively-starter")
	if err != nil {
		return exitError, fmt.Errorf("connect to nats (NATS_URL; credential %s, tls %s): %w", cfg.NATS.Auth.Method(), cfg.NATS.Auth.TLS(), err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return exitError, fmt.Errorf("jetstream: %w", err)
	}
	stream := cfg.NATS.JetStream.Stream
	if _, err := js.Stream(ctx, stream); err != nil {
		return exitError, fmt.Errorf("stream %s (NATS_STREAM; the worker creates it at its first start): %w", stream, err)
	}

	// Each message is published in a span of its own, whose traceparent
	// goes in the NATS headers: the worker continues that trace. Off unless
	// the OTEL_* variables turn it on (internal/leaf/tracing).
	shutdownTracing, _, err := tracing.Setup(ctx, config.OTelLookup, "effectively-starter")
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()

	bar, r := progress(r, size, stderr, "publishing")
	counts := map[string]int{}
	invalid := 0
	enc := json.NewEncoder(stdout)
	err = route.Default().DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		res := publishResult{Line: line, Stream: stream}
		var opts []natsjs.PublishOpt
		typ := "invalid"
		if derr != nil {
			res.Invalid = derr.Error()
			invalid++
			if raw == nil {
				// Longer than message.MaxSize: nothing kept to publish.
				res.Status = "skipped"
				counts[res.Status]++
				return enc.Encode(res)
			}
		} else {
			res.MessageID, res.MsgID, typ = m.ID, jetstream.MsgID(m), m.Type
			opts = append(opts, natsjs.WithMsgID(res.MsgID), natsjs.WithExpectStream(stream))
		}
		subject, err := jetstream.PublishSubject(cfg.NATS.JetStream.Subject, typ)
		if err != nil {
			return fmt.Errorf("NATS_SUBJECT: %w", err)
		}
		res.Subject = subject
		sctx, span := tracing.Tracer().Start(ctx, "publish "+typ, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject),
				attribute.String("effectively.message_id", res.MessageID)))
		msg := nats.NewMsg(subject)
		msg.Data = raw
		tracing.Propagator.Inject(sctx, tracing.HeaderCarrier(msg.Header))
		pctx, cancel := context.WithTimeout(sctx, 10*time.Second)
		ack, err := js.PublishMsg(pctx, msg, opts...)
		cancel()
		span.End()
		if err != nil {
			return fmt.Errorf("message at line %d: publish to %s: %w", line, subject, err)
		}
		res.Sequence, res.Status = ack.Sequence, pubStored
		if ack.Duplicate {
			res.Status = pubDuplicate
			logger.Info("the broker dropped an identical copy", "message_id", res.MessageID, "nats_msg_id", res.MsgID)
		}
		counts[res.Status]++
		return enc.Encode(res)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(stderr, "published %d messages to stream %s: %d stored, %d duplicate (dropped by the broker), %d invalid (the worker quarantines them), %d skipped (too large)\n",
		counts[pubStored]+counts[pubDuplicate]+counts["skipped"], stream, counts[pubStored], counts[pubDuplicate], invalid, counts["skipped"])
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return exitError, fmt.Errorf("interrupted: %w", err)
		}
		return exitError, err
	}
	if invalid > 0 {
		return exitInvalid, nil
	}
	return exitOK, nil
}

// openInput opens name ("-" is stdin) and returns its size when known
// (-1 otherwise).
func openInput(name string, stdin io.Reader) (r io.Reader, size int64, closeFn func(), err error) {
	if name == "-" {
		return stdin, -1, func() {}, nil
	}
	f, err := os.Open(name) //nolint:gosec // the CLI reads the file its user names
	if err != nil {
		return nil, 0, nil, fmt.Errorf("open messages: %w", err)
	}
	size = -1
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	return f, size, func() { _ = f.Close() }, nil
}

// progress wraps r in a progress bar on stderr when stderr is a terminal and
// the size is known.
func progress(r io.Reader, size int64, stderr io.Writer, what string) (*progressbar.ProgressBar, io.Reader) {
	f, ok := stderr.(*os.File)
	if !ok || size <= 0 || !term.IsTerminal(int(f.Fd())) {
		return nil, r
	}
	bar := progressbar.DefaultBytes(size, what)
	return bar, io.TeeReader(r, bar)
}
