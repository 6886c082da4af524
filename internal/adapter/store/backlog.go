package store

import (
	"context"
	"fmt"
)

// Backlog is what Postgres holds that still needs work or an operator: the
// worker's gauges, read at scrape time.
type Backlog struct {
	// InboxPending counts inbox rows whose workflow is not started yet;
	// InboxOldestPendingAge is the age in seconds of the oldest (0 when none).
	InboxPending          int64
	InboxOldestPendingAge float64
	// OutboxUnpublished counts outbox events not yet published;
	// OutboxOldestAge is the age in seconds of the oldest (0 when none).
	OutboxUnpublished int64
	OutboxOldestAge   float64
	// QuarantineByReason counts quarantine rows that were never retried, by
	// reason.
	QuarantineByReason map[string]int64
	// PaymentsOpen counts payments in a state that waits for the provider or
	// an operator (unknown, processing, unexpected), by state.
	PaymentsOpen map[string]int64
	// AuditFindingsOpen counts unresolved audit findings, by kind, every
	// kind present.
	AuditFindingsOpen map[string]int64
	// RefundsPending counts refunds Stripe has not finished (pending);
	// RefundsPendingOldestAge is the age in seconds of the oldest (0 when
	// none), from its claim.
	RefundsPending          int64
	RefundsPendingOldestAge float64
}

// Backlog reads the backlog in one round trip per table. Every query uses
// an index or a small table: the inbox and outbox ones the partial indexes
// on pending and unpublished rows.
func (s *Store) Backlog(ctx context.Context) (Backlog, error) {
	b := Backlog{QuarantineByReason: map[string]int64{}, PaymentsOpen: map[string]int64{}}
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(received_at)), 0)::float8
		  FROM inbox WHERE state = 'pending'`).Scan(&b.InboxPending, &b.InboxOldestPendingAge); err != nil {
		return b, fmt.Errorf("inbox backlog: %w", translate(err))
	}
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
		  FROM outbox WHERE published_at IS NULL`).Scan(&b.OutboxUnpublished, &b.OutboxOldestAge); err != nil {
		return b, fmt.Errorf("outbox backlog: %w", translate(err))
	}
	if err := s.countBy(ctx, b.QuarantineByReason, `SELECT reason, count(*) FROM quarantine WHERE retried_at IS NULL GROUP BY reason`); err != nil {
		return b, fmt.Errorf("quarantine rows: %w", err)
	}
	// Each open state is present (0 when no row has it), so that an alert
	// on it has a series.
	open := make([]string, 0, len(OpenPaymentStates))
	for _, st := range OpenPaymentStates {
		b.PaymentsOpen[string(st)] = 0
		open = append(open, string(st))
	}
	if err := s.countBy(ctx, b.PaymentsOpen, `SELECT state, count(*) FROM payments WHERE state = ANY($1) GROUP BY state`, open); err != nil {
		return b, fmt.Errorf("open payments: %w", err)
	}
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
		  FROM refunds WHERE state = 'pending'`).Scan(&b.RefundsPending, &b.RefundsPendingOldestAge); err != nil {
		return b, fmt.Errorf("pending refunds: %w", translate(err))
	}
	var err error
	if b.AuditFindingsOpen, err = s.OpenFindings(ctx); err != nil {
		return b, err
	}
	return b, nil
}

func (s *Store) countBy(ctx context.Context, into map[string]int64, sql string, args ...any) error {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return translate(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			k string
			n int64
		)
		if err := rows.Scan(&k, &n); err != nil {
			return translate(err)
		}
		into[k] = n
	}
	return translate(rows.Err())
}
