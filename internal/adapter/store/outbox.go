package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxEvent is an event written in the transaction of the state change it
// announces, waiting to be published.
type OutboxEvent struct {
	// EventID identifies the event; every publish of it carries this ID, so
	// the broker and consumers downstream recognise a repeat.
	EventID   string
	Topic     string
	Payload   []byte
	CreatedAt time.Time
}

// PublishFunc publishes a claimed batch and returns the IDs of the events
// the broker confirmed. An event it leaves out stays unpublished and is
// claimed again by a later pass.
type PublishFunc func(ctx context.Context, batch []OutboxEvent) (published []string, err error)

// RelayOutbox claims up to limit unpublished events, oldest first, for
// lease, calls publish with them outside any transaction, marks the
// confirmed ones published and releases the claim of the others. Rows are
// claimed FOR UPDATE SKIP LOCKED in a transaction of their own, so several
// relays never publish the same event at the same time, and no row lock is
// held while the broker answers. It returns how many events were marked,
// and publish's error after marking what it confirmed.
//
// A crash after publish but before the mark leaves the events unpublished:
// once their lease ran out they are published again, with the same event
// ID (at least once). So is a batch whose publish outlasts its lease.
func (s *Store) RelayOutbox(ctx context.Context, limit int, lease time.Duration, publish PublishFunc) (int, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE outbox o SET claimed_until = now() + $2::interval
		  FROM (SELECT event_id FROM outbox
		         WHERE published_at IS NULL AND (claimed_until IS NULL OR claimed_until < now())
		         ORDER BY created_at
		         LIMIT $1
		         FOR UPDATE SKIP LOCKED) c
		 WHERE o.event_id = c.event_id
		RETURNING o.event_id, o.topic, o.payload::text, o.created_at`, limit, lease)
	if err != nil {
		return 0, fmt.Errorf("claim outbox events: %w", translate(err))
	}
	batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutboxEvent, error) {
		var (
			e       OutboxEvent
			payload string
		)
		err := row.Scan(&e.EventID, &e.Topic, &payload, &e.CreatedAt)
		e.Payload = []byte(payload)
		return e, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox events: %w", translate(err))
	}
	if len(batch) == 0 {
		return 0, nil
	}
	// The claim returns rows in no order: publish oldest first.
	slices.SortStableFunc(batch, func(a, b OutboxEvent) int { return a.CreatedAt.Compare(b.CreatedAt) })
	claimed := make([]string, len(batch))
	for i, e := range batch {
		claimed[i] = e.EventID
	}
	published, pubErr := publish(ctx, batch)
	// Mark what the broker confirmed and release the rest, even when ctx
	// ended: an unmarked confirmed event would be published again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rows, err = s.pool.Query(mctx, `
		UPDATE outbox SET claimed_until = NULL,
		       published_at = CASE WHEN event_id = ANY($2) THEN now() END
		 WHERE event_id = ANY($1) AND published_at IS NULL
		RETURNING published_at IS NOT NULL`, claimed, published)
	if err != nil {
		return 0, errors.Join(pubErr, fmt.Errorf("mark %d outbox events published: %w", len(published), translate(err)))
	}
	marks, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, errors.Join(pubErr, fmt.Errorf("mark %d outbox events published: %w", len(published), translate(err)))
	}
	n := 0
	for _, marked := range marks {
		if marked {
			n++
		}
	}
	return n, pubErr
}

// OutboxUnpublished returns how many events wait to be published.
func (s *Store) OutboxUnpublished(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count unpublished outbox events: %w", translate(err))
	}
	return n, nil
}
