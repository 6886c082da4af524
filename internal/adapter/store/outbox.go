package store

import (
	"context"
	"fmt"
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

// RelayOutbox claims up to limit unpublished events, oldest first, calls
// publish with them and marks the confirmed ones published, in one
// transaction. The rows are locked FOR UPDATE SKIP LOCKED, so several relays
// never publish the same event at the same time. It returns how many events
// were marked, and publish's error after marking what it confirmed.
//
// A crash after publish but before the commit leaves the events unpublished:
// they are published again, with the same event ID (at least once).
func (s *Store) RelayOutbox(ctx context.Context, limit int, publish PublishFunc) (int, error) {
	var (
		n      int
		pubErr error
	)
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT event_id, topic, payload::text, created_at FROM outbox
			 WHERE published_at IS NULL
			 ORDER BY created_at
			 LIMIT $1
			 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return fmt.Errorf("claim outbox events: %w", translate(err))
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
			return fmt.Errorf("claim outbox events: %w", translate(err))
		}
		if len(batch) == 0 {
			return nil
		}
		var published []string
		published, pubErr = publish(ctx, batch)
		if len(published) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, `
			UPDATE outbox SET published_at = now()
			 WHERE event_id = ANY($1) AND published_at IS NULL`, published)
		if err != nil {
			return fmt.Errorf("mark %d outbox events published: %w", len(published), translate(err))
		}
		n = int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return 0, err
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
