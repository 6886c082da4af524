package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MessageRef names a message: its consumer and ID.
type MessageRef struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
}

// MessageFilter selects the messages of a bulk operator command
// (`starter redrive` and `starter resolve` with a filter). Zero fields
// select everything.
type MessageFilter struct {
	// FromPayments selects payments rows (resolve); otherwise inbox rows,
	// with their payment when they have one (redrive).
	FromPayments bool
	Consumer     string
	// States are payment states; a message without a payment never
	// matches a state.
	States []PaymentState
	// Since and Until bound the row's time (the payment's claim, the inbox
	// row's arrival): Since inclusive, Until exclusive.
	Since, Until time.Time
	// Finding selects messages with an open audit finding of that kind.
	Finding FindingKind
	// After resumes after this message, in (consumer, message ID) order.
	After MessageRef
	Limit int
}

// SelectMessages returns the messages f selects, in (consumer, message
// ID) order: the order a stopped bulk command resumes in.
func (s *Store) SelectMessages(ctx context.Context, f MessageFilter) ([]MessageRef, error) {
	from, at, state := `inbox m LEFT JOIN payments p ON p.consumer = m.consumer AND p.message_id = m.message_id`, `m.received_at`, `p.state`
	if f.FromPayments {
		from, at, state = `payments m`, `m.created_at`, `m.state`
	}
	states := make([]string, 0, len(f.States))
	for _, st := range f.States {
		states = append(states, string(st))
	}
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 10000
	}
	rows, err := s.pool.Query(ctx, `
		SELECT m.consumer, m.message_id FROM `+from+`
		 WHERE ($1 = '' OR m.consumer = $1)
		   AND (cardinality($2::text[]) = 0 OR `+state+` = ANY($2::text[]))
		   AND ($3::timestamptz IS NULL OR `+at+` >= $3) AND ($4::timestamptz IS NULL OR `+at+` < $4)
		   AND ($5 = '' OR EXISTS (SELECT FROM audit_findings f WHERE f.kind = $5 AND f.resolved_at IS NULL
		                             AND f.message_id = m.message_id AND (f.consumer = '' OR f.consumer = m.consumer)))
		   AND (m.consumer, m.message_id) > ($6::text, $7::text)
		 ORDER BY m.consumer, m.message_id LIMIT $8`,
		f.Consumer, states, since, until, string(f.Finding), f.After.Consumer, f.After.MessageID, limit)
	if err != nil {
		return nil, fmt.Errorf("select messages: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[MessageRef])
	if err != nil {
		return nil, fmt.Errorf("select messages: %w", translate(err))
	}
	return out, nil
}

// QuarantineFilter selects the quarantine rows of `starter quarantine
// retry` with a filter: rows never retried. Zero fields select everything.
type QuarantineFilter struct {
	Reason   string
	Consumer string
	// Since and Until bound the row's first arrival.
	Since, Until time.Time
	// AfterID resumes after this row, in ID order.
	AfterID int64
	Limit   int
}

// SelectQuarantine returns the rows f selects, by ID.
func (s *Store) SelectQuarantine(ctx context.Context, f QuarantineFilter) ([]QuarantineEntry, error) {
	var since, until *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if !f.Until.IsZero() {
		until = &f.Until
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 10000
	}
	rows, err := s.pool.Query(ctx, `SELECT `+quarantineColumns+` FROM quarantine
		 WHERE retried_at IS NULL AND ($1 = '' OR reason = $1) AND ($2 = '' OR consumer = $2)
		   AND ($3::timestamptz IS NULL OR received_at >= $3) AND ($4::timestamptz IS NULL OR received_at < $4)
		   AND id > $5
		 ORDER BY id LIMIT $6`, f.Reason, f.Consumer, since, until, f.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("select quarantine: %w", translate(err))
	}
	return quarantineRows(rows)
}
