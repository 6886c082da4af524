// Package outbox relays the events written to the transactional outbox to
// a broker, through a Publisher (JetStream's is here; Kafka's and
// RabbitMQ's plug in beside it).
//
// An event (order.paid) is written in the same Postgres transaction as the
// state change it announces, so it exists exactly when the change does. The
// Relay claims unpublished rows for a lease (FOR UPDATE SKIP LOCKED in a
// short transaction, so several worker processes share the work without
// publishing an event twice at once, and no row lock is held while the
// broker answers), publishes each with its event ID as the broker's dedup
// key or record key and waits for the broker's confirmation, then marks the
// confirmed rows published.
//
// Delivery is at least once: a crash between the publish and the mark (or
// a publish slower than the lease) publishes the event again. JetStream
// recognises the repeat by its Nats-Msg-Id within the stream's duplicate
// window and stores it once; past it, and on brokers without publish dedup,
// consumers recognise it by the event ID, which every copy carries in a
// header (or the record key) and the payload.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/failpoint"
)

// Publisher publishes one outbox event to a broker.
type Publisher interface {
	// Publish publishes e with e.EventID as the broker's dedup key (or
	// record key, or message ID) and returns nil only once the broker
	// confirmed it stored the event. Duplicate reports that the broker
	// recognised a repeat of an event it already stored.
	Publish(ctx context.Context, e store.OutboxEvent) (duplicate bool, err error)
	// Name names the broker in logs and errors ("jetstream", "kafka").
	Name() string
}

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
	// BatchSize is how many events one transaction claims. Default 100.
	BatchSize int
	// Interval between passes when the last one found nothing. Default 500ms.
	Interval time.Duration
	// PublishTimeout bounds the wait for each broker confirmation. Default 5s.
	PublishTimeout time.Duration
	// Lease is how long a claimed batch is kept from other relays while it
	// is published, and how long a crashed relay's batch waits. A batch
	// slower than its lease may be published twice (at least once, by event
	// ID). Default 10s.
	Lease time.Duration
	// Logger receives a line per failed publish and per duplicate the
	// broker recognised. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.Interval <= 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 5 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 10 * time.Second
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
	// Duplicates counts publishes the broker recognised by their event ID
	// as a repeat of an event it already stored (a relay crashed after
	// publishing and before marking).
	Duplicates int64
	// Failed counts publishes that failed; their rows stay unpublished.
	Failed int64
}

// Relay publishes outbox events through a Publisher.
type Relay struct {
	store *store.Store
	pub   Publisher
	cfg   Config
	stats struct{ published, duplicates, failed atomic.Int64 }
}

// New returns a Relay that reads st's outbox and publishes through pub.
func New(st *store.Store, pub Publisher, cfg Config) (*Relay, error) {
	if st == nil || pub == nil {
		return nil, errors.New("outbox relay: store and publisher are required")
	}
	return &Relay{store: st, pub: pub, cfg: cfg.withDefaults()}, nil
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Published: r.stats.published.Load(), Duplicates: r.stats.duplicates.Load(), Failed: r.stats.failed.Load()}
}

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

// RelayPending publishes unpublished events, a claimed batch at a time,
// until none is left or a publish fails, and returns how many it marked
// published.
func (r *Relay) RelayPending(ctx context.Context) (int, error) {
	total := 0
	for {
		var claimed int
		n, err := r.store.RelayOutbox(ctx, r.cfg.BatchSize, r.cfg.Lease, func(ctx context.Context, batch []store.OutboxEvent) ([]string, error) {
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

// Publish publishes one event and waits for the broker's confirmation. It
// is what the relay does for each claimed row; calling it for an event the
// relay publishes too is a repeat (which JetStream recognises).
func (r *Relay) Publish(ctx context.Context, e store.OutboxEvent) (duplicate bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	duplicate, err = r.pub.Publish(pctx, e)
	if err != nil {
		r.stats.failed.Add(1)
		return false, fmt.Errorf("publish event %s to %s: %w", e.EventID, r.pub.Name(), err)
	}
	if duplicate {
		r.stats.duplicates.Add(1)
		r.cfg.Logger.Info("broker recognised a repeated event", "event_id", e.EventID, "broker", r.pub.Name())
	} else {
		r.stats.published.Add(1)
	}
	return duplicate, nil
}
