package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Quarantine reasons.
const (
	ReasonInvalid         = "invalid"
	ReasonPayloadMismatch = "payload_mismatch"
	ReasonMaxDeliver      = "max_deliver"
)

// QuarantineEntry is a message that could not be processed, kept with its
// reason.
type QuarantineEntry struct {
	ID         int64      `json:"id"`
	Source     string     `json:"source"`
	Consumer   string     `json:"consumer,omitempty"`
	MessageID  string     `json:"message_id,omitempty"`
	Raw        []byte     `json:"-"`
	Reason     string     `json:"reason"`
	Detail     string     `json:"detail"`
	ReceivedAt time.Time  `json:"received_at"`
	RetriedAt  *time.Time `json:"retried_at,omitempty"`
	RetryCount int        `json:"retry_count"`
	Copies     int        `json:"copies"`
}

// Quarantine keeps q and returns its ID. The raw bytes are kept as received;
// the same bytes quarantined again for the same reason return the existing
// entry's ID and count one more copy.
func (s *Store) Quarantine(ctx context.Context, q QuarantineEntry) (int64, error) {
	if q.Raw == nil {
		q.Raw = []byte{}
	}
	sum := sha256.Sum256(q.Raw)
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO quarantine (source, consumer, message_id, raw, raw_sha256, reason, detail)
		VALUES ($1, nullif($2, ''), nullif($3, ''), $4, $5, $6, $7)
		ON CONFLICT (reason, raw_sha256) DO UPDATE
		   SET copies = quarantine.copies + 1, last_seen_at = now()
		RETURNING id`, q.Source, q.Consumer, q.MessageID, q.Raw, hex.EncodeToString(sum[:]), q.Reason, q.Detail).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("quarantine message %q (%s): %w", q.MessageID, q.Reason, translate(err))
	}
	return id, nil
}

const quarantineColumns = `id, source, coalesce(consumer, ''), coalesce(message_id, ''), raw, reason, detail, received_at, retried_at, retry_count, copies`

// QuarantineList returns up to limit entries, newest first.
func (s *Store) QuarantineList(ctx context.Context, limit int) ([]QuarantineEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+quarantineColumns+` FROM quarantine ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", translate(err))
	}
	defer rows.Close()
	var out []QuarantineEntry
	for rows.Next() {
		var q QuarantineEntry
		if err := rows.Scan(&q.ID, &q.Source, &q.Consumer, &q.MessageID, &q.Raw, &q.Reason, &q.Detail, &q.ReceivedAt, &q.RetriedAt, &q.RetryCount, &q.Copies); err != nil {
			return nil, fmt.Errorf("scan quarantine: %w", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list quarantine: %w", translate(err))
	}
	return out, nil
}

// QuarantineGet returns entry id.
func (s *Store) QuarantineGet(ctx context.Context, id int64) (QuarantineEntry, error) {
	var q QuarantineEntry
	err := s.pool.QueryRow(ctx, `SELECT `+quarantineColumns+` FROM quarantine WHERE id = $1`, id).
		Scan(&q.ID, &q.Source, &q.Consumer, &q.MessageID, &q.Raw, &q.Reason, &q.Detail, &q.ReceivedAt, &q.RetriedAt, &q.RetryCount, &q.Copies)
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
