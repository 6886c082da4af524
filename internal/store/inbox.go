package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// InboxState is inbox.state.
type InboxState string

// Inbox states.
const (
	InboxPending    InboxState = "pending"
	InboxDispatched InboxState = "dispatched"
)

// InboxEntry is a message to record in the inbox.
type InboxEntry struct {
	Consumer    string
	MessageID   string
	Payload     []byte // the message exactly as received
	PayloadHash string // canonical hash; a different hash under a seen ID is a payload mismatch
	Source      string // where it came from: "starter", "jetstream", ...
}

// InboxResult is what InsertInbox found.
type InboxResult struct {
	// Inserted is true when this call created the row: the message is new.
	Inserted bool
	// State of the row after the call (InboxPending or InboxDispatched).
	State InboxState
	// PayloadHash of the row as first recorded.
	PayloadHash string
	// WorkflowID, once dispatched.
	WorkflowID string
}

// Mismatch reports whether the row was recorded with a different payload
// than entry: the same message ID reused for different content.
func (r InboxResult) Mismatch(e InboxEntry) bool { return r.PayloadHash != e.PayloadHash }

// InsertInbox records e unless (consumer, message ID) is already there, in one
// round trip: the insert and the read of an existing row are one statement.
// A copy of a recorded message is rejected by the primary key and counted.
func (s *Store) InsertInbox(ctx context.Context, e InboxEntry) (InboxResult, error) {
	// A copy only bumps the row's duplicates counter, and that commit need
	// not wait for the WAL flush: set_config(…, true) turns synchronous
	// commit off for this statement's transaction, and only when nothing
	// was inserted. A crash can then lose the last few milliseconds of
	// counts, never a row; a new row commits durably before the caller
	// acks the message.
	const q = `
		WITH ins AS (
			INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING state, payload_sha256, coalesce(workflow_id, '') AS workflow_id
		), async AS (
			SELECT set_config('synchronous_commit', 'off', true) WHERE NOT EXISTS (SELECT 1 FROM ins)
		), dup AS (
			UPDATE inbox SET duplicates = duplicates + 1
			 WHERE consumer = $1 AND message_id = $2 AND NOT EXISTS (SELECT 1 FROM ins) AND EXISTS (SELECT 1 FROM async)
			RETURNING state, payload_sha256, coalesce(workflow_id, '') AS workflow_id
		)
		SELECT true, state, payload_sha256, workflow_id FROM ins
		UNION ALL
		SELECT false, state, payload_sha256, workflow_id FROM dup`
	// A concurrent insert of the same key can commit after this statement's
	// snapshot was taken, leaving both branches empty: run it again, and the
	// second run sees the committed row.
	for range 3 {
		var r InboxResult
		err := s.pool.QueryRow(ctx, q, e.Consumer, e.MessageID, e.Payload, e.PayloadHash, e.Source).
			Scan(&r.Inserted, &r.State, &r.PayloadHash, &r.WorkflowID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return InboxResult{}, fmt.Errorf("insert inbox %s/%s: %w", e.Consumer, e.MessageID, translate(err))
		}
		return r, nil
	}
	return InboxResult{}, fmt.Errorf("insert inbox %s/%s: row neither inserted nor found", e.Consumer, e.MessageID)
}

// MarkDispatched records that the message's workflow was started (or found
// already started).
func (s *Store) MarkDispatched(ctx context.Context, consumer, messageID, workflowID string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE inbox SET state = 'dispatched', workflow_id = $3, dispatched_at = coalesce(dispatched_at, now())
		 WHERE consumer = $1 AND message_id = $2`, consumer, messageID, workflowID)
	if err != nil {
		return fmt.Errorf("mark %s/%s dispatched: %w", consumer, messageID, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark %s/%s dispatched: %w", consumer, messageID, ErrNotFound)
	}
	return nil
}

// InboxRow is an inbox row as an operator sees it.
type InboxRow struct {
	Consumer     string     `json:"consumer"`
	MessageID    string     `json:"message_id"`
	PayloadHash  string     `json:"payload_sha256"`
	Source       string     `json:"source"`
	State        InboxState `json:"state"`
	WorkflowID   string     `json:"workflow_id,omitempty"`
	ReceivedAt   time.Time  `json:"received_at"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	Duplicates   int        `json:"duplicates"`
	Payload      []byte     `json:"-"`
}
