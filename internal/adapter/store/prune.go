package store

import (
	"context"
	"fmt"
	"time"
)

// Tables that Prune can delete from.
const (
	PruneProcessedMessages = "processed_messages"
	PruneInbox             = "inbox"
	PruneOutbox            = "outbox"
	// PruneQuarantine is pruned past the quarantine retention, not the
	// retention; it is not in PruneTables.
	PruneQuarantine = "quarantine"
)

// pruneQueries delete at most $2 rows older than $1 seconds, by the
// database's clock (the one that wrote the timestamps). Only settled rows
// are candidates: a pending inbox row or an unpublished outbox event is never
// deleted, whatever its age. SKIP LOCKED keeps a batch from waiting on a row
// a dispatcher or relay holds.
var pruneQueries = map[string]string{
	PruneProcessedMessages: `
		DELETE FROM processed_messages WHERE (consumer, message_id) IN (
			SELECT consumer, message_id FROM processed_messages
			 WHERE processed_at < now() - make_interval(secs => $1)
			 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	// An order's paying message is kept while a refund of the order is
	// pending: its row holds the only copy of the receipt's address.
	PruneInbox: `
		DELETE FROM inbox WHERE (consumer, message_id) IN (
			SELECT consumer, message_id FROM inbox i
			 WHERE state = 'dispatched'
			   AND dispatched_at < now() - make_interval(secs => $1)
			   AND received_at < now() - make_interval(secs => $1)
			   AND NOT EXISTS (SELECT FROM payments p JOIN refunds r ON r.order_id = p.order_id
			                    WHERE p.consumer = i.consumer AND p.message_id = i.message_id AND r.state = 'pending')
			 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	PruneOutbox: `
		DELETE FROM outbox WHERE event_id IN (
			SELECT event_id FROM outbox
			 WHERE published_at < now() - make_interval(secs => $1)
			 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	// A quarantine row ages from the last copy of its message: a message
	// that keeps arriving keeps its row, which recognises and counts it.
	PruneQuarantine: `
		DELETE FROM quarantine WHERE id IN (
			SELECT id FROM quarantine
			 WHERE last_seen_at < now() - make_interval(secs => $1)
			   AND received_at < now() - make_interval(secs => $1)
			 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
}

// PruneTables lists the record tables, pruned past the retention, in the
// order a pruning run visits them. Prune also accepts PruneQuarantine.
var PruneTables = []string{PruneProcessedMessages, PruneInbox, PruneOutbox}

// Prune deletes up to limit rows of table that are older than olderThan and
// settled, in one statement, and returns how many it deleted. Callers repeat
// it until it deletes fewer than limit, so no single statement holds locks
// on a large part of the table.
func (s *Store) Prune(ctx context.Context, table string, olderThan time.Duration, limit int) (int64, error) {
	q, ok := pruneQueries[table]
	if !ok {
		return 0, fmt.Errorf("prune: unknown table %q", table)
	}
	if olderThan <= 0 || limit <= 0 {
		return 0, fmt.Errorf("prune %s: age %s and limit %d must be positive", table, olderThan, limit)
	}
	tag, err := s.pool.Exec(ctx, q, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", table, translate(err))
	}
	return tag.RowsAffected(), nil
}
