// Package outbox relays the events written to the transactional outbox to
// JetStream.
//
// An event (order.paid) is written in the same Postgres transaction as the
// state change it announces, so it exists exactly when the change does. The
// Relay claims unpublished rows (FOR UPDATE SKIP LOCKED, so several worker
// processes share the work without publishing an event twice at once),
// publishes each with Nats-Msg-Id set to the event ID and waits for the
// broker's ack, then marks the row published in the same transaction.
//
// Delivery is at least once: a crash between the publish and the commit of
// the mark publishes the event again. Within the stream's duplicate window
// the broker recognises the repeat by its Nats-Msg-Id and stores it once
// (the PubAck reports Duplicate); after the window, consumers recognise it
// by the event ID, which every copy carries in the Nats-Msg-Id header and
// the payload.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/failpoint"
)

// Defaults of the relay. internal/config applies them.
const (
	// DefaultStream is the stream the events are published to.
	DefaultStream = "EFFECTIVELY_EVENTS"
	// DefaultSubjectPrefix is prepended to an event's topic to form its
	// subject: order.paid is published on effectively.events.order.paid.
	DefaultSubjectPrefix = "effectively.events"
)

// Config configures a Relay. Zero values take the defaults noted per field.
type Config struct {
	// Stream is the stream the subjects must land in; a publish that no
	// stream (or another one) captures fails instead of being lost.
	// Default DefaultStream.
	Stream string
	// SubjectPrefix is prepended to each event's topic. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string
	// BatchSize is how many events one transaction claims. Default 100.
	BatchSize int
	// Interval between passes when the last one found nothing. Default 500ms.
	Interval time.Duration
	// PublishTimeout bounds the wait for each broker ack. Default 5s.
	PublishTimeout time.Duration
	// Logger receives a line per failed publish and per duplicate the
	// broker recognised. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = DefaultSubjectPrefix
	}
	c.SubjectPrefix = strings.TrimSuffix(c.SubjectPrefix, ".")
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.Interval <= 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Stats counts what a Relay did since it was created.
type Stats struct {
	// Published counts events the broker stored.
	Published int64
	// Duplicates counts publishes the broker recognised by Nats-Msg-Id as
	// a repeat of an event it already stored (a relay crashed after
	// publishing and before marking).
	Duplicates int64
	// Failed counts publishes that failed; their rows stay unpublished.
	Failed int64
}

// Relay publishes outbox events to JetStream.
type Relay struct {
	store *store.Store
	js    jetstream.JetStream
	cfg   Config
	stats struct{ published, duplicates, failed atomic.Int64 }
}

// New returns a Relay that reads st's outbox and publishes through js.
func New(st *store.Store, js jetstream.JetStream, cfg Config) (*Relay, error) {
	if st == nil || js == nil {
		return nil, errors.New("outbox relay: store and jetstream are required")
	}
	return &Relay{store: st, js: js, cfg: cfg.withDefaults()}, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Published: r.stats.published.Load(), Duplicates: r.stats.duplicates.Load(), Failed: r.stats.failed.Load()}
}

// Subject is the subject an event of topic is published on.
func (r *Relay) Subject(topic string) string { return r.cfg.SubjectPrefix + "." + topic }

// Run relays until ctx ends, then returns nil once the batch in flight is
// settled. A failed pass is logged and retried after a growing pause.
func (r *Relay) Run(ctx context.Context) error {
	pause := r.cfg.Interval
	for {
		_, err := r.RelayPending(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.cfg.Logger.Warn("outbox relay pass failed", "error", err.Error(), "retry_in", pause.String())
			pause = min(2*pause, 30*time.Second)
		default:
			pause = r.cfg.Interval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// RelayPending publishes unpublished events, a batch per transaction, until
// none is left or a publish fails, and returns how many it marked published.
func (r *Relay) RelayPending(ctx context.Context) (int, error) {
	total := 0
	for {
		var claimed int
		n, err := r.store.RelayOutbox(ctx, r.cfg.BatchSize, func(ctx context.Context, batch []store.OutboxEvent) ([]string, error) {
			claimed = len(batch)
			return r.publishBatch(ctx, batch)
		})
		total += n
		if err != nil || claimed < r.cfg.BatchSize {
			return total, err
		}
	}
}

// publishBatch publishes batch in order and stops at the first failure,
// returning the IDs the broker acknowledged.
func (r *Relay) publishBatch(ctx context.Context, batch []store.OutboxEvent) ([]string, error) {
	done := make([]string, 0, len(batch))
	for _, e := range batch {
		if _, err := r.Publish(ctx, e); err != nil {
			return done, err
		}
		done = append(done, e.EventID)
	}
	failpoint.Hit(failpoint.OutboxAfterPublish)
	return done, nil
}

// Publish publishes one event and waits for the broker's ack. It is what
// the relay does for each claimed row; calling it for an event the relay
// publishes too is a repeat the broker recognises.
func (r *Relay) Publish(ctx context.Context, e store.OutboxEvent) (*jetstream.PubAck, error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	msg := nats.NewMsg(r.Subject(e.Topic))
	msg.Data = e.Payload
	msg.Header.Set("Content-Type", "application/json")
	ack, err := r.js.PublishMsg(pctx, msg, jetstream.WithMsgID(e.EventID), jetstream.WithExpectStream(r.cfg.Stream))
	if err != nil {
		r.stats.failed.Add(1)
		return nil, fmt.Errorf("publish event %s to %s: %w", e.EventID, msg.Subject, err)
	}
	if ack.Duplicate {
		r.stats.duplicates.Add(1)
		r.cfg.Logger.Info("broker recognised a repeated event", "event_id", e.EventID, "stream_seq", ack.Sequence)
	} else {
		r.stats.published.Add(1)
	}
	return ack, nil
}
