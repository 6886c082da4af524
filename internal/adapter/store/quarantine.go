package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Quarantine reasons.
const (
	ReasonInvalid         = "invalid"
	ReasonPayloadMismatch = "payload_mismatch"
	ReasonMaxDeliver      = "max_deliver"
	// ReasonTooLarge: the message is longer than message.MaxSize. Only its
	// first bytes are kept (Raw), with its Size and the SHA-256 of the
	// whole, so it cannot be sent again from the quarantine.
	ReasonTooLarge = "too_large"
)

// QuarantineEntry is a message that could not be processed, kept with its
// reason.
type QuarantineEntry struct {
	ID        int64  `json:"id"`
	Source    string `json:"source"`
	Consumer  string `json:"consumer,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	Raw       []byte `json:"-"`
	// Size is the message's length in bytes. It exceeds len(Raw) when only
	// a prefix was kept (ReasonTooLarge). Default len(Raw).
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the whole message, the row's identity
	// with Reason. Default the digest of Raw; set it when Raw is a prefix.
	SHA256     string     `json:"raw_sha256"`
	Reason     string     `json:"reason"`
	Detail     string     `json:"detail"`
	ReceivedAt time.Time  `json:"received_at"`
	RetriedAt  *time.Time `json:"retried_at,omitempty"`
	RetryCount int        `json:"retry_count"`
	Copies     int        `json:"copies"`
}

// Truncated reports whether Raw is only the beginning of the message.
func (q QuarantineEntry) Truncated() bool { return q.Size > int64(len(q.Raw)) }

// Quarantine keeps q and returns its ID. The raw bytes are kept as received
// (or their prefix, with SHA256 and Size describing the whole); the same
// message quarantined again for the same reason returns the existing entry's
// ID and counts one more copy.
func (s *Store) Quarantine(ctx context.Context, q QuarantineEntry) (int64, error) {
	id, _, err := s.QuarantineFirst(ctx, q)
	return id, err
}

// QuarantineFirst is Quarantine, and reports whether q created its row:
// false when the same message was quarantined for the same reason before.
func (s *Store) QuarantineFirst(ctx context.Context, q QuarantineEntry) (id int64, first bool, err error) {
	if q.Raw == nil {
		q.Raw = []byte{}
	}
	if q.SHA256 == "" {
		sum := sha256.Sum256(q.Raw)
		q.SHA256 = hex.EncodeToString(sum[:])
	}
	if q.Size == 0 {
		q.Size = int64(len(q.Raw))
	}
	// copies starts at 1 and a conflict raises it: 1 means this insert.
	err = s.pool.QueryRow(ctx, `
		INSERT INTO quarantine (source, consumer, message_id, raw, raw_sha256, size, reason, detail)
		VALUES ($1, nullif($2, ''), nullif($3, ''), $4, $5, $6, $7, $8)
		ON CONFLICT (reason, raw_sha256) DO UPDATE
		   SET copies = quarantine.copies + 1, last_seen_at = now()
		RETURNING id, copies = 1`, q.Source, q.Consumer, q.MessageID, q.Raw, q.SHA256, q.Size, q.Reason, q.Detail).Scan(&id, &first)
	if err != nil {
		return 0, false, fmt.Errorf("quarantine message %q (%s): %w", q.MessageID, q.Reason, translate(err))
	}
	return id, first, nil
}

const quarantineColumns = `id, source, coalesce(consumer, ''), coalesce(message_id, ''), raw, coalesce(size, octet_length(raw)), raw_sha256, reason, detail, received_at, retried_at, retry_count, copies`

// scanQuarantine reads one row selected as quarantineColumns.
func scanQuarantine(row pgx.Row) (QuarantineEntry, error) {
	var q QuarantineEntry
	err := row.Scan(&q.ID, &q.Source, &q.Consumer, &q.MessageID, &q.Raw, &q.Size, &q.SHA256, &q.Reason, &q.Detail, &q.ReceivedAt, &q.RetriedAt, &q.RetryCount, &q.Copies)
	return q, err
}

// quarantineRows reads every row of rows, selected as quarantineColumns.
func quarantineRows(rows pgx.Rows) ([]QuarantineEntry, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (QuarantineEntry, error) { return scanQuarantine(row) })
}

// QuarantineList returns up to limit entries, newest first.
func (s *Store) QuarantineList(ctx context.Context, limit int) ([]QuarantineEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+quarantineColumns+` FROM quarantine ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", translate(err))
	}
	out, err := quarantineRows(rows)
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", translate(err))
	}
	return out, nil
}

// QuarantineGet returns entry id.
func (s *Store) QuarantineGet(ctx context.Context, id int64) (QuarantineEntry, error) {
	q, err := scanQuarantine(s.pool.QueryRow(ctx, `SELECT `+quarantineColumns+` FROM quarantine WHERE id = $1`, id))
	if err != nil {
		return QuarantineEntry{}, fmt.Errorf("quarantine entry %d: %w", id, translate(err))
	}
	return q, nil
}

// QuarantineMarkRetried records a re-drive of entry id.
func (s *Store) QuarantineMarkRetried(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE quarantine SET retried_at = now(), retry_count = retry_count + 1 WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("mark quarantine entry %d retried: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("quarantine entry %d: %w", id, ErrNotFound)
	}
	return nil
}
