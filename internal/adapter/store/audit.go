package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FindingKind is the kind of a difference the audit found between the
// ledger and a provider's own record (docs/runbook.md has an entry per
// kind).
type FindingKind string

// The finding kinds.
const (
	// FindingMoneyWithoutRecord: a succeeded PaymentIntent of this
	// deployment with no succeeded payment in the ledger.
	FindingMoneyWithoutRecord FindingKind = "money_without_record"
	// FindingRecordWithoutMoney: a succeeded payment whose PaymentIntent is
	// not succeeded, or does not exist.
	FindingRecordWithoutMoney FindingKind = "record_without_money"
	// FindingDuplicateCharge: more than one succeeded PaymentIntent for one
	// message or one order.
	FindingDuplicateCharge FindingKind = "duplicate_charge"
	// FindingAmountMismatch: the PaymentIntent's amount or currency differs
	// from the payment's.
	FindingAmountMismatch FindingKind = "amount_mismatch"
	// FindingRefundMismatch: the refunds of a PaymentIntent at Stripe sum to
	// another amount than the payment's refunded_amount.
	FindingRefundMismatch FindingKind = "refund_mismatch"
	// FindingReceiptWithoutEvent: a receipt recorded sent with no SendGrid
	// event for its key after the bound (webhooks on).
	FindingReceiptWithoutEvent FindingKind = "receipt_without_event"
	// FindingEventWithoutReceipt: a SendGrid event whose key has no
	// receipt in the ledger.
	FindingEventWithoutReceipt FindingKind = "event_without_receipt"
)

// FindingKinds lists every kind, in the order reports use.
var FindingKinds = []FindingKind{
	FindingMoneyWithoutRecord, FindingRecordWithoutMoney, FindingDuplicateCharge, FindingAmountMismatch,
	FindingRefundMismatch, FindingReceiptWithoutEvent, FindingEventWithoutReceipt,
}

// Finding is an audit_findings row: one difference, with the IDs on both
// sides.
type Finding struct {
	Kind FindingKind `json:"kind"`
	// Object names what differs, unique per kind: a PaymentIntent ID, a
	// payment's or receipt's key, "message:<id>" or "order:<id>".
	Object    string `json:"object"`
	Consumer  string `json:"consumer,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	OrderID   int64  `json:"order_id,omitempty"`
	// StripeIDs are the provider's objects involved (pi_…, re_…).
	StripeIDs []string `json:"stripe_ids,omitempty"`
	// LedgerRef is the ledger's side: a payment's or receipt's key.
	LedgerRef string `json:"ledger_ref,omitempty"`
	Detail    string `json:"detail"`
	// FoundAt is when an audit first found it, LastSeenAt the last time.
	FoundAt    time.Time  `json:"found_at"`
	LastSeenAt time.Time  `json:"last_seen_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
}

// RecordFinding keeps f, once per (kind, object): a finding seen before
// only moves its last_seen_at (and keeps its first detail, and its
// resolution if an operator resolved it: a difference settled outside the
// ledger, such as a refunded second charge, is found again by every audit
// of its window). It returns the row as kept and whether it is new.
func (s *Store) RecordFinding(ctx context.Context, f Finding) (kept Finding, inserted bool, err error) {
	ids := f.StripeIDs
	if ids == nil {
		ids = []string{}
	}
	var orderID *int64
	if f.OrderID != 0 {
		orderID = &f.OrderID
	}
	kept, err = scanFinding(s.pool.QueryRow(ctx, `
		INSERT INTO audit_findings (kind, object, consumer, message_id, order_id, stripe_ids, ledger_ref, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (kind, object) DO UPDATE SET last_seen_at = now()
		RETURNING `+findingColumns+`, xmax = 0`,
		string(f.Kind), f.Object, f.Consumer, f.MessageID, orderID, ids, f.LedgerRef, f.Detail), &inserted)
	if err != nil {
		return Finding{}, false, fmt.Errorf("record audit finding %s %s: %w", f.Kind, f.Object, err)
	}
	return kept, inserted, nil
}

const findingColumns = `kind, object, consumer, message_id, coalesce(order_id, 0), stripe_ids, ledger_ref, detail,
	found_at, last_seen_at, resolved_at, coalesce(resolution, '')`

// scanFinding scans findingColumns, then extra.
func scanFinding(row pgx.Row, extra ...any) (Finding, error) {
	var x Finding
	err := row.Scan(append([]any{&x.Kind, &x.Object, &x.Consumer, &x.MessageID, &x.OrderID, &x.StripeIDs, &x.LedgerRef, &x.Detail,
		&x.FoundAt, &x.LastSeenAt, &x.ResolvedAt, &x.Resolution}, extra...)...)
	return x, translate(err)
}

// ResolveFinding marks finding (kind, object) resolved with the operator's
// reason, kept with the row; the open-findings gauge drops at once. It
// changes nothing else: settling the difference (a refund, a corrected
// row) is the operator's (docs/runbook.md). A finding that does not exist
// is ErrNotFound; one resolved before is returned as it stands, its first
// resolution kept, with ErrResolved.
func (s *Store) ResolveFinding(ctx context.Context, kind FindingKind, object, reason string) (Finding, error) {
	if strings.TrimSpace(reason) == "" {
		return Finding{}, fmt.Errorf("resolve audit finding %s %s: a reason is required", kind, object)
	}
	f, err := scanFinding(s.pool.QueryRow(ctx, `
		UPDATE audit_findings SET resolved_at = now(), resolution = $3
		 WHERE kind = $1 AND object = $2 AND resolved_at IS NULL
		RETURNING `+findingColumns, string(kind), object, reason))
	if !errors.Is(err, ErrNotFound) {
		if err != nil {
			return Finding{}, fmt.Errorf("resolve audit finding %s %s: %w", kind, object, err)
		}
		return f, nil
	}
	f, err = scanFinding(s.pool.QueryRow(ctx, `SELECT `+findingColumns+` FROM audit_findings WHERE kind = $1 AND object = $2`, string(kind), object))
	if err != nil {
		return Finding{}, fmt.Errorf("resolve audit finding %s %s: %w", kind, object, err)
	}
	return f, fmt.Errorf("resolve audit finding %s %s: %w at %s", kind, object, ErrResolved, f.ResolvedAt.UTC().Format(time.RFC3339))
}

// FindingFilter selects findings. Zero fields select everything.
type FindingFilter struct {
	Kind FindingKind
	// All includes resolved findings.
	All   bool
	Limit int
}

// Findings lists findings, oldest first.
func (s *Store) Findings(ctx context.Context, f FindingFilter) ([]Finding, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.pool.Query(ctx, `SELECT `+findingColumns+` FROM audit_findings
		 WHERE ($1 = '' OR kind = $1) AND ($2 OR resolved_at IS NULL)
		 ORDER BY found_at, kind, object LIMIT $3`, string(f.Kind), f.All, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit findings: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Finding, error) { return scanFinding(row) })
	if err != nil {
		return nil, fmt.Errorf("list audit findings: %w", err)
	}
	return out, nil
}

// OpenFindings counts unresolved findings by kind, every kind present.
func (s *Store) OpenFindings(ctx context.Context) (map[string]int64, error) {
	m := make(map[string]int64, len(FindingKinds))
	for _, k := range FindingKinds {
		m[string(k)] = 0
	}
	if err := s.countBy(ctx, m, `SELECT kind, count(*) FROM audit_findings WHERE resolved_at IS NULL GROUP BY kind`); err != nil {
		return nil, fmt.Errorf("open audit findings: %w", err)
	}
	return m, nil
}

// AuditCheckpoint is where a scheduled audit stands.
type AuditCheckpoint struct {
	AuditedUntil time.Time
	Slice        time.Duration
}

// AuditCheckpointOf returns the checkpoint called name, and ok=false when
// there is none yet.
func (s *Store) AuditCheckpointOf(ctx context.Context, name string) (cp AuditCheckpoint, ok bool, err error) {
	var secs int64
	err = translate(s.pool.QueryRow(ctx, `SELECT audited_until, slice_seconds FROM audit_checkpoints WHERE name = $1`, name).
		Scan(&cp.AuditedUntil, &secs))
	if errors.Is(err, ErrNotFound) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("audit checkpoint %s: %w", name, err)
	}
	cp.Slice = time.Duration(secs) * time.Second
	return cp, true, nil
}

// SaveAuditCheckpoint stores checkpoint name. It never moves audited_until
// backwards.
func (s *Store) SaveAuditCheckpoint(ctx context.Context, name string, cp AuditCheckpoint) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO audit_checkpoints (name, audited_until, slice_seconds) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET audited_until = greatest(audit_checkpoints.audited_until, excluded.audited_until),
		       slice_seconds = excluded.slice_seconds, updated_at = now()`,
		name, cp.AuditedUntil, max(int64(cp.Slice/time.Second), 1))
	if err != nil {
		return fmt.Errorf("save audit checkpoint %s: %w", name, translate(err))
	}
	return nil
}

// AuditPayment is the ledger's side of a payment, as the audit compares it.
type AuditPayment struct {
	Payment
	// Refunded is payments.refunded_amount; RefundsOpen counts its refunds
	// still claimed (their outcome at Stripe not recorded yet).
	Refunded    int64
	RefundsOpen int
}

const auditPaymentColumns = `p.order_id, p.consumer, p.message_id, p.idempotency_key, p.state, p.amount, p.currency,
	coalesce(p.payment_intent_id, ''), coalesce(p.charge_id, ''), p.created_at, p.updated_at, p.refunded_amount,
	(SELECT count(*) FROM refunds r WHERE r.order_id = p.order_id AND r.state = 'claimed')::int`

func (s *Store) auditPayments(ctx context.Context, where string, args ...any) ([]AuditPayment, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+auditPaymentColumns+` FROM payments p WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("audit payments: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditPayment, error) {
		var p AuditPayment
		err := row.Scan(&p.OrderID, &p.Consumer, &p.MessageID, &p.Key, &p.State, &p.Amount, &p.Currency,
			&p.PaymentIntentID, &p.ChargeID, &p.CreatedAt, &p.UpdatedAt, &p.Refunded, &p.RefundsOpen)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit payments: %w", translate(err))
	}
	return out, nil
}

// AuditPaymentsOf returns the payments that name one of the PaymentIntents
// piIDs, one of the messages messageIDs or one of the orders orderIDs.
func (s *Store) AuditPaymentsOf(ctx context.Context, piIDs, messageIDs []string, orderIDs []int64) ([]AuditPayment, error) {
	return s.auditPayments(ctx, `p.payment_intent_id = ANY($1) OR p.message_id = ANY($2) OR p.order_id = ANY($3)`,
		piIDs, messageIDs, orderIDs)
}

// AuditSucceededPayments returns the succeeded payments claimed or last
// changed (Payment.UpdatedAt: not by a refund) at or after from and before
// to, and those with a refund claimed or settled then. A payment that
// settled after the audit passed the slice it was claimed in (processing
// for days, say) is picked by the slice it settled in.
func (s *Store) AuditSucceededPayments(ctx context.Context, from, to time.Time) ([]AuditPayment, error) {
	return s.auditPayments(ctx, `p.state = 'succeeded' AND ((p.created_at >= $1 AND p.created_at < $2)
		OR (p.updated_at >= $1 AND p.updated_at < $2)
		OR EXISTS (SELECT FROM refunds r WHERE r.order_id = p.order_id
		           AND ((r.created_at >= $1 AND r.created_at < $2) OR (r.updated_at >= $1 AND r.updated_at < $2))))
		ORDER BY p.created_at`, from, to)
}

// ReceiptsWithoutEvent returns the keys of the mails recorded sent from
// from until before to, and last changed before sentBefore, for which
// SendGrid has sent no event. A mail is picked by when it was recorded
// sent, not claimed: one whose sends were retried past the slice it was
// claimed in is compared in the slice it was sent in.
func (s *Store) ReceiptsWithoutEvent(ctx context.Context, from, to, sentBefore time.Time) ([]Effect, error) {
	return s.auditEffects(ctx, `
		SELECT key, consumer, message_id, coalesce(provider_ref, '') FROM effects e
		 WHERE kind = 'email' AND state = 'succeeded' AND updated_at >= $1 AND updated_at < $2 AND updated_at < $3
		   AND NOT EXISTS (SELECT FROM email_events ev WHERE ev.idempotency_key = e.key)
		 ORDER BY updated_at`, from, to, sentBefore)
}

// EventsWithoutReceipt returns, one per key, the SendGrid events received
// from from until before to whose key has no mail in the ledger: Key is the
// event's key, ProviderRef its sg_message_id.
func (s *Store) EventsWithoutReceipt(ctx context.Context, from, to time.Time) ([]Effect, error) {
	return s.auditEffects(ctx, `
		SELECT DISTINCT ON (idempotency_key) idempotency_key, '', '', sg_message_id FROM email_events ev
		 WHERE received_at >= $1 AND received_at < $2
		   AND NOT EXISTS (SELECT FROM effects e WHERE e.key = ev.idempotency_key)
		 ORDER BY idempotency_key, received_at`, from, to)
}

func (s *Store) auditEffects(ctx context.Context, sql string, args ...any) ([]Effect, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("audit receipts: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Effect, error) {
		e := Effect{Kind: KindEmail}
		err := row.Scan(&e.Key, &e.Consumer, &e.MessageID, &e.ProviderRef)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit receipts: %w", translate(err))
	}
	return out, nil
}
