package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Outcomes of refund messages, recorded in processed_messages.
const (
	// OutcomeRefunded: Stripe created the refund, and it succeeded.
	OutcomeRefunded Outcome = "refunded"
	// OutcomeRefundPending: Stripe created the refund but has not moved
	// the money yet; UpdateRefund moves it to refunded or refund_failed.
	OutcomeRefundPending Outcome = "refund_pending"
	// OutcomeRefundFailed: Stripe refused the refund; its amount was given
	// back to the payment.
	OutcomeRefundFailed Outcome = "refund_failed"
	// OutcomeRefundExceedsPayment: the refund is more than what remains of
	// the payment; Stripe was not called.
	OutcomeRefundExceedsPayment Outcome = "refund_exceeds_payment"
	// OutcomeOrderNotPaid: the order has no payment that succeeded; Stripe
	// was not called.
	OutcomeOrderNotPaid Outcome = "order_not_paid"
)

// RefundState is refunds.state.
type RefundState string

// Refund states. A claimed, pending or succeeded refund counts against its
// payment; a failed one does not. Pending: Stripe created the refund but
// has not moved the money yet (its status pending or requires_action).
const (
	RefundClaimed   RefundState = "claimed"
	RefundPending   RefundState = "pending"
	RefundSucceeded RefundState = "succeeded"
	RefundFailed    RefundState = "failed"
)

// Refund is a refunds row.
type Refund struct {
	Consumer        string      `json:"consumer"`
	MessageID       string      `json:"message_id"`
	OrderID         int64       `json:"order_id"`
	Key             string      `json:"idempotency_key"`
	State           RefundState `json:"state"`
	Amount          int64       `json:"amount"`
	Currency        string      `json:"currency"`
	Reason          string      `json:"reason"`
	PaymentIntentID string      `json:"payment_intent_id"`
	RefundID        string      `json:"refund_id,omitempty"`
	RefundStatus    string      `json:"refund_status,omitempty"`
	FailureCode     string      `json:"failure_code,omitempty"`
	FailureMessage  string      `json:"failure_message,omitempty"`
	CreatedAt       time.Time   `json:"created_at"`
	UpdatedAt       time.Time   `json:"updated_at"`
}

const refundColumns = `consumer, message_id, order_id, idempotency_key, state, amount, currency, reason, payment_intent_id,
	coalesce(refund_id, ''), coalesce(refund_status, ''), coalesce(failure_code, ''), coalesce(failure_message, ''), created_at, updated_at`

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	err := row.Scan(&r.Consumer, &r.MessageID, &r.OrderID, &r.Key, &r.State, &r.Amount, &r.Currency, &r.Reason, &r.PaymentIntentID,
		&r.RefundID, &r.RefundStatus, &r.FailureCode, &r.FailureMessage, &r.CreatedAt, &r.UpdatedAt)
	return r, translate(err)
}

// RefundClaim asks to refund part of an order's payment for one message.
type RefundClaim struct {
	Consumer    string
	MessageID   string
	OrderID     int64
	Amount      int64
	Reason      string
	Key         string // "refund:<message id>"
	RequestHash string // hash of the refund request
	// AwaitPayment: an order with no payment row yet is RefundPaymentMissing
	// (nothing recorded: its order message may still be on its way), not
	// order_not_paid.
	AwaitPayment bool
	// WantAddress asks for the order's receipt address with the payment's
	// row (RefundClaimResult.ReceiptTo), read as ReceiptAddress reads it:
	// no round trip of its own.
	WantAddress bool
}

// RefundDecision says what the refund activity should do next.
type RefundDecision string

// Refund decisions.
const (
	// RefundOwned: the amount is reserved against the payment and this
	// claim owns the refund's ledger row; calling Stripe with the key is safe.
	RefundOwned RefundDecision = "owned"
	// RefundDone: the refund's outcome is already recorded.
	RefundDone RefundDecision = "done"
	// RefundExceedsPayment: the amount is more than what remains of the
	// payment. Recorded as the message's outcome; do not call Stripe.
	RefundExceedsPayment RefundDecision = "refund_exceeds_payment"
	// RefundOrderNotPaid: the order has no succeeded payment. Recorded as
	// the message's outcome; do not call Stripe.
	RefundOrderNotPaid RefundDecision = "order_not_paid"
	// RefundPaymentPending: the order's payment has no final outcome yet
	// (being charged, or waiting for an operator). Nothing is recorded:
	// decide again once it settles.
	RefundPaymentPending RefundDecision = "payment_pending"
	// RefundPaymentMissing: the order has no payment at all yet and the
	// claim asked to wait for one (RefundClaim.AwaitPayment). Nothing is
	// recorded: decide again later.
	RefundPaymentMissing RefundDecision = "payment_missing"
)

// RefundClaimResult is what ClaimRefund found or did.
type RefundClaimResult struct {
	Decision RefundDecision
	// Refund is the message's refunds row, for RefundOwned and a RefundDone
	// that got past the rule.
	Refund Refund
	// Claim is the fencing token of a RefundOwned (see ClaimResult.Claim).
	Claim int32
	// PaymentState is the order's payment state, when it has a payment.
	PaymentState PaymentState
	// Paid and Refunded are the payment's amount and what its refunds
	// already hold, for RefundExceedsPayment.
	Paid, Refunded int64
	// ReceiptTo is the order's receipt address when the claim asked for it
	// (RefundClaim.WantAddress) and the order has a payment whose message
	// is still kept; "" otherwise.
	ReceiptTo string
}

// ClaimRefund decides a refund in one transaction, before any call to
// Stripe. The order's payment row is locked (FOR UPDATE), so the refunds of
// one payment are decided one at a time: a refund that fits in what remains
// adds its amount to payments.refunded_amount and inserts its refunds row
// and ledger row; one that does not, or whose order was never paid, records
// that outcome with the message's processed row. The CHECK on
// refunded_amount makes the rule hold even against a statement that forgot
// it. A repeat of the same message replays the recorded decision.
//
// A first claim takes four round trips once the connection has its
// statements prepared: the begin, its reads in one pipeline (the locks in
// the package's order, then the message's processed and refunds rows), one
// statement that reserves the amount and inserts the refund and its ledger
// row (reserveRefundSQL), and the commit.
func (s *Store) ClaimRefund(ctx context.Context, c RefundClaim) (RefundClaimResult, error) {
	var res RefundClaimResult
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		res = RefundClaimResult{}
		noPayment, outcome, r, err := readRefundClaim(ctx, tx, c, &res)
		switch {
		case err != nil:
			return err
		// A refusal already recorded for this message stands.
		case outcome == OutcomeRefundExceedsPayment:
			res.Decision = RefundExceedsPayment
			return nil
		case outcome == OutcomeOrderNotPaid:
			res.Decision = RefundOrderNotPaid
			return nil
		case noPayment && c.AwaitPayment:
			res.Decision = RefundPaymentMissing
			return nil
		case noPayment:
			res.Decision = RefundOrderNotPaid
			return recordRefundDecision(ctx, tx, c, OutcomeOrderNotPaid)
		case r != nil:
			// This message's refund already got past the rule: take its
			// ledger row again, or replay its outcome.
			return claimRefundEffect(ctx, tx, c, *r, &res)
		}

		// Every state but succeeded and failed (claimed, unknown, …) is still
		// waiting for its outcome.
		switch res.PaymentState {
		case PaymentSucceeded:
		case PaymentFailed:
			res.Decision = RefundOrderNotPaid
			return recordRefundDecision(ctx, tx, c, OutcomeOrderNotPaid)
		default:
			res.Decision = RefundPaymentPending
			return nil
		}

		// The rule. The WHERE decides; the CHECK backs it.
		var (
			nr    Refund
			claim *int32
		)
		err = tx.QueryRow(ctx, reserveRefundSQL, c.Consumer, c.MessageID, c.OrderID, c.Key, c.Amount, c.Reason,
			c.RequestHash, KindRefund, StateClaimed).
			Scan(&nr.Consumer, &nr.MessageID, &nr.OrderID, &nr.Key, &nr.State, &nr.Amount, &nr.Currency, &nr.Reason, &nr.PaymentIntentID,
				&nr.RefundID, &nr.RefundStatus, &nr.FailureCode, &nr.FailureMessage, &nr.CreatedAt, &nr.UpdatedAt, &claim)
		switch err = translate(err); {
		case errors.Is(err, ErrNotFound):
			res.Decision = RefundExceedsPayment
			return recordRefundDecision(ctx, tx, c, OutcomeRefundExceedsPayment)
		case err != nil:
			return fmt.Errorf("reserve refund of order %d: %w", c.OrderID, err)
		case claim == nil:
			// A ledger row of the key stood already and was not taken
			// over: claimEffect tells why (terminal, or another request).
			return claimRefundEffect(ctx, tx, c, nr, &res)
		}
		res.Refund, res.Decision, res.Claim = nr, RefundOwned, *claim
		return nil
	})
	if err != nil {
		return RefundClaimResult{}, fmt.Errorf("claim %s: %w", c.Key, err)
	}
	return res, nil
}

// reserveRefundSQL is the rule and what follows it, in one statement: the
// amount is added to the payment's refunded_amount only where it fits ($3
// order, $5 amount), and only then are the refunds row and its ledger row
// (claim 1, or the next claim of a row left open) inserted. No row: the
// refund exceeds what remains. A NULL claim: the ledger row was not taken.
const reserveRefundSQL = `
	WITH reserved AS (
		UPDATE payments SET refunded_amount = refunded_amount + $5
		 WHERE order_id = $3 AND refunded_amount + $5 <= amount
		RETURNING currency, coalesce(payment_intent_id, '') AS payment_intent_id
	), inserted AS (
		INSERT INTO refunds (consumer, message_id, order_id, idempotency_key, amount, currency, reason, payment_intent_id)
		SELECT $1, $2, $3, $4, $5, currency, $6, payment_intent_id FROM reserved
		RETURNING ` + refundColumns + `
	), claimed AS (
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		SELECT $4, $8, $1, $2, $7, $9, 1 FROM inserted` + takeOverEffect + `
		RETURNING claim
	)
	SELECT inserted.*, (SELECT claim FROM claimed) FROM inserted`

// readRefundClaim reads what ClaimRefund decides on, in one pipeline and in
// the package's lock order: the refund's ledger row is locked first, then
// the order's payment (every refund of the order queues there), whose
// state, amount, refunded amount and, when c asks, receipt address go into
// res; then the message's processed row (its outcome, "" when none) and its
// refunds row (nil when none). noPayment: the order has no payment row.
func readRefundClaim(ctx context.Context, tx pgx.Tx, c RefundClaim, res *RefundClaimResult) (noPayment bool, outcome Outcome, r *Refund, err error) {
	b := &pgx.Batch{}
	b.Queue(lockEffectSQL, c.Key)
	b.Queue(`SELECT state, amount, refunded_amount, CASE WHEN $2 THEN coalesce(`+receiptAddressOf("p")+`, '') ELSE '' END
		  FROM payments p WHERE order_id = $1 FOR UPDATE`, c.OrderID, c.WantAddress)
	b.Queue(`SELECT outcome FROM processed_messages WHERE consumer = $1 AND message_id = $2`, c.Consumer, c.MessageID)
	b.Queue(`SELECT `+refundColumns+` FROM refunds WHERE consumer = $1 AND message_id = $2`, c.Consumer, c.MessageID)
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("read claim of %s: %w", c.MessageID, translate(cerr))
		}
	}()
	if _, err = br.Exec(); err != nil {
		return false, "", nil, fmt.Errorf("lock effect %s: %w", c.Key, translate(err))
	}
	err = translate(br.QueryRow().Scan(&res.PaymentState, &res.Paid, &res.Refunded, &res.ReceiptTo))
	if noPayment = errors.Is(err, ErrNotFound); err != nil && !noPayment {
		return false, "", nil, fmt.Errorf("lock payment of order %d: %w", c.OrderID, err)
	}
	if err = translate(br.QueryRow().Scan(&outcome)); err != nil && !errors.Is(err, ErrNotFound) {
		return false, "", nil, fmt.Errorf("read processed row of %s: %w", c.MessageID, err)
	}
	found, err := scanRefund(br.QueryRow())
	switch {
	case err == nil:
		r = &found
	case !errors.Is(err, ErrNotFound):
		return false, "", nil, fmt.Errorf("read refund of %s: %w", c.MessageID, err)
	}
	return noPayment, outcome, r, nil
}

// claimRefundEffect takes the refund's ledger row for c: RefundOwned with
// its fencing token, or RefundDone when the outcome is recorded.
func claimRefundEffect(ctx context.Context, tx pgx.Tx, c RefundClaim, r Refund, res *RefundClaimResult) error {
	res.Refund = r
	if r.State != RefundClaimed {
		res.Decision = RefundDone
		return nil
	}
	e, owned, err := claimEffect(ctx, tx, EffectClaim{
		Key: c.Key, Kind: KindRefund, Consumer: c.Consumer, MessageID: c.MessageID,
		RequestHash: c.RequestHash, State: StateClaimed,
	})
	if err != nil {
		return err
	}
	if !owned {
		res.Decision = RefundDone
		return nil
	}
	res.Decision, res.Claim = RefundOwned, e.Claim
	return nil
}

// recordRefundDecision records a refund the rule refused as the message's
// outcome.
func recordRefundDecision(ctx context.Context, tx pgx.Tx, c RefundClaim, outcome Outcome) error {
	if _, err := tx.Exec(ctx, `
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, c.Consumer, c.MessageID, outcome, c.OrderID); err != nil {
		return fmt.Errorf("record %s for %s: %w", outcome, c.MessageID, translate(err))
	}
	return nil
}

// RefundSuccess records a refund Stripe created.
type RefundSuccess struct {
	Consumer  string
	MessageID string
	OrderID   int64
	Key       string
	Claim     int32 // the fencing token ClaimRefund returned
	RefundID  string
	// Status is the Refund's status at Stripe: succeeded, or pending or
	// requires_action, which record the refund pending, with no receipt.
	Status string
	// Receipt, when set, is the refund's receipt to claim in the record's
	// own statement (RecordRefundClaimingReceipt): its Key, RequestHash and
	// Policy; Consumer and MessageID are the refund's.
	Receipt *EmailClaim
}

// RecordRefundSucceeded settles the refund's ledger row, records the
// Stripe Refund and inserts the message's processed row, in one statement.
// Idempotent; ErrFenced for a superseded claim.
func (s *Store) RecordRefundSucceeded(ctx context.Context, r RefundSuccess) (already bool, err error) {
	already, _, err = s.RecordRefundClaimingReceipt(ctx, r)
	return already, err
}

// RecordRefundClaimingReceipt is RecordRefundSucceeded and, when r.Receipt
// is set, the claim of the refund's receipt in the same statement, as
// RecordPaidClaimingReceipt claims an order's: its ledger row is created
// under claim 1 (in_flight under AtMostOnce, claimed otherwise) only when
// this statement settled the refund and no row exists under the key.
// receipt is that claim's token, 0 when this statement claimed nothing; the
// one execution that made the record alone learns it, and any other
// attempt at the receipt claims the row through ClaimEmail, which fences it.
//
// No row under the receipt's legacy key ("email:<message id>", see
// EmailClaim.LegacyKey) can exist for a refund this statement settles: an
// earlier release claimed that row only after the refund was recorded.
func (s *Store) RecordRefundClaimingReceipt(ctx context.Context, r RefundSuccess) (already bool, receipt int32, err error) {
	res, err := encodeResult(r.Key, map[string]any{"refund_id": r.RefundID, "status": r.Status})
	if err != nil {
		return false, 0, err
	}
	mail, mailState := r.Receipt.held()
	already, receipt, err = s.settleClaimingReceipt(ctx, recordRefundedClaimingReceiptSQL, r.Key, r.Claim, r.RefundID, res,
		r.Consumer, r.MessageID, r.OrderID, r.Status, mail.Key, KindEmail, mail.RequestHash, mailState)
	if err != nil {
		return false, 0, fmt.Errorf("record refund of order %d: %w", r.OrderID, err)
	}
	return already, receipt, nil
}

// recordRefundedClaimingReceiptSQL settles the ledger row and, in the same
// statement, marks the refund ($7 consumer, $8 message ID) succeeded with
// its Stripe ID ($4) and status ($10), inserts the processed row (order
// $9) and, when the refund was settled, the receipt's ledger row ($11 key,
// none when empty; $12 kind, $13 request hash, $14 state) under claim 1
// unless the key has one. It returns the settled count and the receipt's
// claim (0 for none).
var recordRefundedClaimingReceiptSQL = settleCTE + refundedCTEs + `, mail AS (
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		SELECT $11::text, $12::text, $7::text, $8::text, $13::text, $14::text, 1
		 WHERE EXISTS (SELECT FROM settled) AND $11::text <> '' AND ` + refundStateOf("$10::text") + ` = 'succeeded'
		ON CONFLICT (key) DO NOTHING
		RETURNING claim
	)
	SELECT (SELECT count(*) FROM settled), coalesce((SELECT claim FROM mail), 0)`

// refundedSQL follows a settle CTE: it marks the refund ($7 consumer, $8
// message ID) succeeded with its Stripe ID ($4) and status ($10) and
// inserts the processed row (order $9) when the ledger row was settled.
var refundedSQL = refundedCTEs + `
	SELECT count(*) FROM settled`

// refundedCTEs are refundedSQL's refund update and processed insert.
// A refund Stripe answers pending or requires_action ($10) is recorded
// pending, with the outcome refund_pending (UpdateRefund settles it).
var refundedCTEs = `, refunded AS (
		UPDATE refunds SET state = ` + refundStateOf("$10::text") + `, refund_id = $4, refund_status = nullif($10::text, ''), updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND EXISTS (SELECT FROM settled)
	), processed AS (
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		SELECT $7::text, $8::text, CASE WHEN ` + refundStateOf("$10::text") + ` = 'pending' THEN 'refund_pending' ELSE 'refunded' END, $9::bigint
		 WHERE EXISTS (SELECT FROM settled)
	)`

// refundStateOf is the refunds.state of a refund Stripe created with the
// status status (an SQL expression): pending while Stripe has not moved
// the money, succeeded otherwise.
func refundStateOf(status string) string {
	return `CASE WHEN ` + status + ` IN ('pending', 'requires_action') THEN 'pending' ELSE 'succeeded' END`
}

// RefundFailure records a refund Stripe refused.
type RefundFailure struct {
	Consumer  string
	MessageID string
	OrderID   int64
	Key       string
	Claim     int32
	Code      string
	Message   string
}

// RecordRefundFailed settles the ledger row as failed, marks the refund
// failed, gives its amount back to the payment and inserts the processed
// row, in one statement. Idempotent; ErrFenced for a superseded claim.
func (s *Store) RecordRefundFailed(ctx context.Context, f RefundFailure) (already bool, err error) {
	already, err = s.settleAnd(ctx, recordRefundFailedSQL, f.Key, f.Claim, StateFailed, "",
		map[string]any{"code": f.Code}, f.Message,
		f.Consumer, f.MessageID, f.OrderID, f.Code)
	if err != nil {
		return false, fmt.Errorf("record failed refund of order %d: %w", f.OrderID, err)
	}
	return already, nil
}

// recordRefundFailedSQL settles the ledger row as failed and, in the same
// statement, marks the refund ($7, $8) failed with its code ($10) and
// message ($6), gives its amount back to the payment of order $9 and
// inserts the processed row.
var recordRefundFailedSQL = settleCTE + refundFailedSQL

// refundFailedSQL follows a settle CTE: see recordRefundFailedSQL.
const refundFailedSQL = `, failed AS (
		UPDATE refunds SET state = 'failed', failure_code = nullif($10::text, ''), failure_message = nullif($6::text, ''), updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND state = 'claimed' AND EXISTS (SELECT FROM settled)
		RETURNING order_id, amount
	), released AS (
		UPDATE payments p SET refunded_amount = p.refunded_amount - failed.amount
		  FROM failed WHERE p.order_id = failed.order_id
	), processed AS (
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		SELECT $7::text, $8::text, 'refund_failed', $9::bigint WHERE EXISTS (SELECT FROM settled)
	)
	SELECT count(*) FROM settled`

// RefundOf returns the refunds row of message (consumer, messageID).
func (s *Store) RefundOf(ctx context.Context, consumer, messageID string) (Refund, error) {
	r, err := scanRefund(s.pool.QueryRow(ctx, `SELECT `+refundColumns+` FROM refunds WHERE consumer = $1 AND message_id = $2`, consumer, messageID))
	if err != nil {
		return Refund{}, fmt.Errorf("refund of %s: %w", messageID, err)
	}
	return r, nil
}

// RefundsOfOrder returns the refunds rows of order orderID, oldest first.
func (s *Store) RefundsOfOrder(ctx context.Context, orderID int64) ([]Refund, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE order_id = $1 ORDER BY created_at, message_id`, orderID)
	if err != nil {
		return nil, fmt.Errorf("refunds of order %d: %w", orderID, translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Refund, error) { return scanRefund(row) })
	if err != nil {
		return nil, fmt.Errorf("refunds of order %d: %w", orderID, translate(err))
	}
	return out, nil
}

// RefundedAmount returns what the refunds of order orderID hold against its
// payment (payments.refunded_amount) and the payment's amount.
func (s *Store) RefundedAmount(ctx context.Context, orderID int64) (refunded, paid int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT refunded_amount, amount FROM payments WHERE order_id = $1`, orderID).Scan(&refunded, &paid)
	if err = translate(err); err != nil {
		return 0, 0, fmt.Errorf("refunded amount of order %d: %w", orderID, err)
	}
	return refunded, paid, nil
}

// ReceiptAddress returns the address the order's receipt went to, read from
// the inbox row of the message that paid it: effectively keeps no other copy
// of a customer's address, so once that row is pruned (RETENTION) the
// address is gone, and ErrNotFound says so.
func (s *Store) ReceiptAddress(ctx context.Context, orderID int64) (string, error) {
	var addr *string
	err := s.pool.QueryRow(ctx, `SELECT `+receiptAddressOf("p")+` FROM payments p WHERE p.order_id = $1`, orderID).Scan(&addr)
	if err = translate(err); err != nil {
		return "", fmt.Errorf("receipt address of order %d: %w", orderID, err)
	}
	if addr == nil || *addr == "" {
		return "", fmt.Errorf("receipt address of order %d: %w", orderID, ErrNotFound)
	}
	return *addr, nil
}

// receiptAddressOf is the receipt address of the payments row p: the
// customer_email of the inbox row of the message that paid it, NULL once
// that row is pruned.
func receiptAddressOf(p string) string {
	return `(SELECT convert_from(i.payload, 'UTF8')::jsonb -> 'data' ->> 'customer_email'
		  FROM inbox i WHERE i.consumer = ` + p + `.consumer AND i.message_id = ` + p + `.message_id)`
}
