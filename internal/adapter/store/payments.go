package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OrderStatus is orders.status.
type OrderStatus string

// Order statuses.
const (
	OrderPending       OrderStatus = "pending"
	OrderPaid          OrderStatus = "paid"
	OrderPaymentFailed OrderStatus = "payment_failed"
)

// Outcome is processed_messages.outcome: how a message's processing ended.
type Outcome string

// Outcomes recorded in processed_messages.
const (
	OutcomePaid              Outcome = "paid"
	OutcomePaymentFailed     Outcome = "payment_failed"
	OutcomeBusinessDuplicate Outcome = "business_duplicate"
)

// PaymentState is payments.state. succeeded and failed are final;
// processing, unknown and unexpected are open cases (see OpenPayments).
type PaymentState string

// Payment states.
const (
	PaymentClaimed    PaymentState = "claimed"
	PaymentProcessing PaymentState = "processing"
	PaymentSucceeded  PaymentState = "succeeded"
	PaymentFailed     PaymentState = "failed"
	PaymentUnknown    PaymentState = "unknown"
	PaymentUnexpected PaymentState = "unexpected"
)

// PaymentClaim asks to claim an order's payment for one message.
type PaymentClaim struct {
	Consumer    string
	MessageID   string
	OrderID     int64
	Amount      int64
	Currency    string
	Key         string // "payment:<message id>"
	RequestHash string // hash of the Stripe request parameters
	// WorkflowID is the workflow that claims. The claim marks the
	// message's inbox row dispatched with it (see ClaimPayment); empty
	// leaves workflow_id as it is.
	WorkflowID string
}

// ClaimOutcome says what the payment activity should do next.
type ClaimOutcome string

// Claim outcomes.
const (
	// ClaimOwned: this message holds the order's payment and no outcome is
	// recorded yet; calling Stripe with the key is safe (a repeat is replayed).
	ClaimOwned ClaimOutcome = "owned"
	// ClaimDone: this message's payment already has a recorded outcome.
	ClaimDone ClaimOutcome = "done"
	// ClaimBusinessDuplicate: another message holds this order; do not charge.
	ClaimBusinessDuplicate ClaimOutcome = "business_duplicate"
)

// Payment is a payments row.
type Payment struct {
	OrderID         int64        `json:"order_id"`
	Consumer        string       `json:"consumer"`
	MessageID       string       `json:"message_id"`
	Key             string       `json:"idempotency_key"`
	State           PaymentState `json:"state"`
	Amount          int64        `json:"amount"`
	Currency        string       `json:"currency"`
	PaymentIntentID string       `json:"payment_intent_id,omitempty"`
	ChargeID        string       `json:"charge_id,omitempty"`
	FailureCode     string       `json:"failure_code,omitempty"`
	DeclineCode     string       `json:"decline_code,omitempty"`
	FailureMessage  string       `json:"failure_message,omitempty"`
	// StripeStatus is the PaymentIntent's last status seen at Stripe.
	StripeStatus string    `json:"stripe_status,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	// UpdatedAt is when the payment itself last changed (its state, its
	// PaymentIntent). Its refunds, rows of their own, do not move it: the
	// audit finds a payment that settled late by it.
	UpdatedAt time.Time `json:"updated_at"`
}

// ClaimResult is what ClaimPayment found or did.
type ClaimResult struct {
	Outcome ClaimOutcome
	// Payment is the order's payment row: this message's, or for
	// ClaimBusinessDuplicate the one held by the other message.
	Payment Payment
	// Claim is the fencing token of a ClaimOwned: the record that follows
	// must present it, and fails with ErrFenced once a later claim took
	// the row. It also counts the claims made so far.
	Claim int32
}

const paymentColumns = `order_id, consumer, message_id, idempotency_key, state, amount, currency,
	coalesce(payment_intent_id, ''), coalesce(charge_id, ''), coalesce(failure_code, ''),
	coalesce(decline_code, ''), coalesce(failure_message, ''), created_at, updated_at`

// paymentColumnsFull is paymentColumns and the columns added later.
const paymentColumnsFull = paymentColumns + `, coalesce(stripe_status, '')`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	err := row.Scan(&p.OrderID, &p.Consumer, &p.MessageID, &p.Key, &p.State, &p.Amount, &p.Currency,
		&p.PaymentIntentID, &p.ChargeID, &p.FailureCode, &p.DeclineCode, &p.FailureMessage, &p.CreatedAt, &p.UpdatedAt)
	return p, translate(err)
}

func scanPaymentFull(row pgx.Row) (Payment, error) {
	var p Payment
	err := row.Scan(&p.OrderID, &p.Consumer, &p.MessageID, &p.Key, &p.State, &p.Amount, &p.Currency,
		&p.PaymentIntentID, &p.ChargeID, &p.FailureCode, &p.DeclineCode, &p.FailureMessage, &p.CreatedAt, &p.UpdatedAt,
		&p.StripeStatus)
	return p, translate(err)
}

// ClaimPayment claims order c.OrderID's payment for message c.MessageID in
// one transaction, before any call to Stripe. The unique payments.order_id is
// the business key: when another message already holds the order, the claim
// records this message as a business duplicate (its processed row commits in
// the same transaction) and returns ClaimBusinessDuplicate, so the caller
// never charges.
//
// Its first statement also marks the message's inbox row dispatched, saving
// the intake a commit per message: a claim proves the workflow was started,
// and every OrderPlaced run claims first, whatever follows (a charge, a
// decline, a business duplicate, a retry that finds the outcome recorded).
// A row that a Dispatcher holds (FOR UPDATE SKIP LOCKED) is skipped rather
// than waited for: that Dispatcher's start is refused as already started,
// and it marks the row itself.
func (s *Store) ClaimPayment(ctx context.Context, c PaymentClaim) (ClaimResult, error) {
	// The first claim of a message, the common case, in one statement: the
	// order, its payment row and the ledger row under claim 1. When the
	// payment row exists already (a retry, or another message holds the
	// order) nothing is inserted, and the transaction below sorts it out.
	res := ClaimResult{Outcome: ClaimOwned}
	err := s.pool.QueryRow(ctx, firstClaimSQL, c.OrderID, c.Amount, c.Currency, c.MessageID, c.Consumer, c.Key, KindPayment, c.RequestHash, StateClaimed, c.WorkflowID).
		Scan(&res.Payment.OrderID, &res.Payment.Consumer, &res.Payment.MessageID, &res.Payment.Key, &res.Payment.State,
			&res.Payment.Amount, &res.Payment.Currency, &res.Payment.PaymentIntentID, &res.Payment.ChargeID,
			&res.Payment.FailureCode, &res.Payment.DeclineCode, &res.Payment.FailureMessage,
			&res.Payment.CreatedAt, &res.Payment.UpdatedAt, &res.Claim)
	if err == nil {
		return res, nil
	}
	if err = translate(err); !errors.Is(err, ErrNotFound) {
		return ClaimResult{}, fmt.Errorf("claim payment of order %d: %w", c.OrderID, err)
	}
	res = ClaimResult{}
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The ledger row first, then the payment (the package's lock order).
		if err := lockEffect(ctx, tx, c.Key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO orders (id, amount, currency, message_id)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO NOTHING`,
			c.OrderID, c.Amount, c.Currency, c.MessageID); err != nil {
			return fmt.Errorf("insert order %d: %w", c.OrderID, translate(err))
		}
		p, err := scanPayment(tx.QueryRow(ctx, `
			INSERT INTO payments (order_id, consumer, message_id, idempotency_key, amount, currency)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT DO NOTHING
			RETURNING `+paymentColumns,
			c.OrderID, c.Consumer, c.MessageID, c.Key, c.Amount, c.Currency))
		if errors.Is(err, ErrNotFound) {
			// A payment row exists for this order or this message: read it.
			p, err = scanPayment(tx.QueryRow(ctx, `
				SELECT `+paymentColumns+` FROM payments
				 WHERE order_id = $1 OR (consumer = $2 AND message_id = $3)
				 ORDER BY (order_id = $1) DESC LIMIT 1
				 FOR UPDATE`, c.OrderID, c.Consumer, c.MessageID))
		}
		if err != nil {
			return fmt.Errorf("claim payment of order %d: %w", c.OrderID, err)
		}
		res.Payment = p
		if p.Consumer != c.Consumer || p.MessageID != c.MessageID || p.OrderID != c.OrderID {
			res.Outcome = ClaimBusinessDuplicate
			if _, err := tx.Exec(ctx, `
				INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
				VALUES ($1, $2, 'business_duplicate', $3)
				ON CONFLICT DO NOTHING`, c.Consumer, c.MessageID, c.OrderID); err != nil {
				return fmt.Errorf("record business duplicate %s: %w", c.MessageID, translate(err))
			}
			return nil
		}
		if p.State != PaymentClaimed {
			res.Outcome = ClaimDone
			return nil
		}
		e, owned, err := claimEffect(ctx, tx, EffectClaim{
			Key: c.Key, Kind: KindPayment, Consumer: c.Consumer, MessageID: c.MessageID,
			RequestHash: c.RequestHash, State: StateClaimed,
		})
		if err != nil {
			return err
		}
		if !owned {
			// Only a terminal row is not taken: the outcome is recorded.
			res.Outcome = ClaimDone
			return nil
		}
		res.Outcome, res.Claim = ClaimOwned, e.Claim
		return nil
	})
	return res, err
}

// firstClaimSQL inserts the order ($1 ID, $2 amount, $3 currency, $4
// message ID) unless it exists, the message's payment row ($5 consumer, $6
// key) unless the order or the message has one, and, only when the payment
// row was inserted, the ledger row ($7 kind, $8 request hash, $9 state)
// under claim 1; it returns the payment row and the claim, or no row. In
// every case it marks the message's inbox row dispatched by workflow $10,
// unless the row is marked already or locked by a Dispatcher.
var firstClaimSQL = `
	WITH ` + markDispatchedCTE("$5", "$4", "$10", "true") + `, ord AS (
		INSERT INTO orders (id, amount, currency, message_id) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING
	), pay AS (
		INSERT INTO payments (order_id, consumer, message_id, idempotency_key, amount, currency)
		VALUES ($1, $5, $4, $6, $2, $3)
		ON CONFLICT DO NOTHING
		RETURNING *
	), eff AS (
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		SELECT $6::text, $7::text, $5::text, $4::text, $8::text, $9::text, 1 WHERE EXISTS (SELECT FROM pay)` + takeOverEffect + `
		RETURNING claim
	)
	SELECT ` + paymentColumns + `, eff.claim FROM pay, eff`

// markDispatchedCTE is a CTE named inb that marks the inbox row of message
// (consumer, messageID) dispatched by workflow workflowID (kept as it is
// when empty) when cond holds, unless the row is marked already or locked
// by a Dispatcher (SKIP LOCKED: never waited for, so it joins no
// deadlock). Any transaction of the workflow's proves its start.
func markDispatchedCTE(consumer, messageID, workflowID, cond string) string {
	return `inb AS (
		UPDATE inbox SET state = 'dispatched', workflow_id = coalesce(nullif(` + workflowID + `::text, ''), workflow_id),
		       dispatched_at = coalesce(dispatched_at, now())
		 WHERE (consumer, message_id) IN (
			SELECT consumer, message_id FROM inbox
			 WHERE consumer = ` + consumer + ` AND message_id = ` + messageID + ` AND state = 'pending' AND ` + cond + `
			 FOR UPDATE SKIP LOCKED)
	)`
}

// recordMarksDispatched is the CTE with which a payment's record marks the
// message's ($7 consumer, $8 message ID) inbox row dispatched by workflow
// $wf when the settle matched, $wf is not empty and the row is still
// pending: the record of a payment claimed at intake, whose attempt made no
// claim to mark it, or of a claim that skipped the row under a lock.
func recordMarksDispatched(wf string) string {
	return `, ` + markDispatchedCTE("$7", "$8", wf, `EXISTS (SELECT FROM settled) AND `+wf+`::text <> ''`)
}

// PaymentSuccess records a charge that Stripe confirmed.
type PaymentSuccess struct {
	Consumer        string
	MessageID       string
	OrderID         int64
	Key             string
	Claim           int32 // the fencing token ClaimPayment returned
	PaymentIntentID string
	ChargeID        string
	Amount          int64
	Currency        string
	// Reconciled is true when the charge was found by lookup rather than
	// returned by the create call.
	Reconciled bool
	// WorkflowID, when set, is the workflow whose record marks the
	// message's inbox row dispatched.
	WorkflowID string
	// Receipt, when set, is the order's receipt to claim in the record's
	// own statement (RecordPaidClaimingReceipt): its Key, RequestHash and
	// Policy; Consumer, MessageID and OrderID are the payment's.
	Receipt *EmailClaim
}

// RecordPaymentSucceeded records the charge, marks the order paid, inserts the
// message's processed row and the order.paid outbox event, all in one
// statement (one transaction, one round trip). Repeating it after it
// committed is a no-op that reports already=true; a caller whose claim was
// superseded gets ErrFenced.
func (s *Store) RecordPaymentSucceeded(ctx context.Context, r PaymentSuccess) (already bool, err error) {
	already, _, err = s.RecordPaidClaimingReceipt(ctx, r)
	return already, err
}

// RecordPaidClaimingReceipt is RecordPaymentSucceeded and, when r.Receipt
// is set, the claim of the order's receipt in the same statement: its
// ledger row is created under claim 1 (in_flight under AtMostOnce, claimed
// otherwise) and the order's receipt marked sending, only when this
// statement settled the payment and no row exists under the key. receipt
// is that claim's token, 0 when this statement claimed nothing.
//
// The token is good for the one execution that made the record, which
// alone learns it: any other attempt at the receipt (a retry, a local
// attempt run again after a crash, a workflow's SendReceipt) claims the row
// through ClaimEmail, which counts the token up past it, so the first
// holder can no longer record, and the new one looks the mail up first.
func (s *Store) RecordPaidClaimingReceipt(ctx context.Context, r PaymentSuccess) (already bool, receipt int32, err error) {
	result := map[string]any{"payment_intent_id": r.PaymentIntentID, "charge_id": r.ChargeID, "reconciled": r.Reconciled}
	event := map[string]any{
		"type": "order.paid", "order_id": r.OrderID, "message_id": r.MessageID,
		"payment_intent_id": r.PaymentIntentID, "amount": r.Amount, "currency": r.Currency,
	}
	res, err := encodeResult(r.Key, result)
	if err != nil {
		return false, 0, err
	}
	mail, mailState := r.Receipt.held()
	already, receipt, err = s.settleClaimingReceipt(ctx, recordPaidClaimingReceiptSQL, r.Key, r.Claim, r.PaymentIntentID, res,
		r.Consumer, r.MessageID, r.OrderID, r.ChargeID, OrderPaidEventID(r.MessageID), event,
		mail.Key, KindEmail, mail.RequestHash, mailState, r.WorkflowID)
	if err != nil {
		return false, 0, fmt.Errorf("record payment of order %d: %w", r.OrderID, err)
	}
	return already, receipt, nil
}

// held is the receipt a record's statement claims (none for a nil c) and
// the state its row is created in: in_flight under AtMostOnce, claimed
// otherwise.
func (c *EmailClaim) held() (EmailClaim, EffectState) {
	if c == nil {
		return EmailClaim{}, StateClaimed
	}
	if c.Policy == AtMostOnce {
		return *c, StateInFlight
	}
	return *c, StateClaimed
}

// settleClaimingReceipt runs a record's statement that settles key's row
// succeeded under claim (providerRef, res; the settle's six arguments, then
// args) and returns the settled count and the receipt's claim: the claim
// when this statement settled the row, else whether an earlier record
// settled it the same way (settledBefore), with no claim.
func (s *Store) settleClaimingReceipt(ctx context.Context, stmt, key string, claim int32, providerRef string, res []byte, args ...any) (already bool, receipt int32, err error) {
	var n int
	all := append([]any{key, claim, StateSucceeded, providerRef, res, ""}, args...)
	if err := s.pool.QueryRow(ctx, stmt, all...).Scan(&n, &receipt); err != nil {
		return false, 0, fmt.Errorf("settle effect %s: %w", key, translate(err))
	}
	if n == 1 {
		return false, receipt, nil
	}
	already, err = s.settledBefore(ctx, key, claim, StateSucceeded, providerRef)
	return already, 0, err
}

// recordPaidClaimingReceiptSQL settles the payment's ledger row and, in the
// same statement, does what paidSQL does and, when the payment was
// settled, the receipt's ledger row ($13 key, none when empty; $14 kind, $15
// request hash, $16 state) inserted under claim 1 unless the key has one, the order's
// receipt marked sending when it was, in the order's one update, and the
// inbox row marked dispatched by workflow $17 (recordMarksDispatched). It
// returns the settled count and the receipt's claim (0 for none).
var recordPaidClaimingReceiptSQL = settleCTE + paidPaymentCTE + recordMarksDispatched("$17") + `, mail AS (
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		SELECT $13::text, $14::text, $7::text, $8::text, $15::text, $16::text, 1 WHERE EXISTS (SELECT FROM settled) AND $13::text <> ''
		ON CONFLICT (key) DO NOTHING
		RETURNING claim
	)` + orderOutcomeCTEs(OutcomePaid, `receipt_status = CASE WHEN EXISTS (SELECT FROM mail) THEN `+keepEventReceipt("'sending'")+` ELSE receipt_status END`) +
	paidEventCTE + `
	SELECT (SELECT count(*) FROM settled), coalesce((SELECT claim FROM mail), 0)`

// paidSQL follows a settle CTE: it records the charge ($7 consumer, $8
// message ID, $9 order ID, $10 charge ID), marks the order paid, inserts the
// processed row and the order.paid outbox event ($11 event ID, $12 payload)
// when the ledger row was settled.
var paidSQL = paidPaymentCTE + orderOutcomeCTEs(OutcomePaid, "") + paidEventCTE + `
	SELECT count(*) FROM settled`

// paidPaymentCTE and paidEventCTE are paidSQL's payment update and its
// order.paid outbox insert.
const (
	paidPaymentCTE = `, paid AS (
		UPDATE payments SET state = 'succeeded', payment_intent_id = $4, charge_id = nullif($10::text, ''),
		       stripe_status = 'succeeded', updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND EXISTS (SELECT FROM settled)
	)`
	paidEventCTE = `, event AS (
		INSERT INTO outbox (event_id, topic, payload)
		SELECT $11::text, 'order.paid', $12::jsonb WHERE EXISTS (SELECT FROM settled)
		ON CONFLICT (event_id) DO NOTHING
	)`
)

// OrderPaidEventID is the outbox event ID of the order.paid event a message
// causes: derived from the message, so a repeat can never emit a second one.
func OrderPaidEventID(messageID string) string { return "order.paid:" + messageID }

// PaymentFailure records a charge that Stripe refused (declined card or an
// invalid request): a final outcome.
type PaymentFailure struct {
	Consumer    string
	MessageID   string
	OrderID     int64
	Key         string
	Claim       int32 // the fencing token ClaimPayment returned
	Code        string
	DeclineCode string
	Message     string
	// PaymentIntentID is set when Stripe created the PaymentIntent before
	// declining it.
	PaymentIntentID string
	// StripeStatus is the PaymentIntent's status, when one was seen.
	StripeStatus string
	// WorkflowID, when set, is the workflow whose record marks the
	// message's inbox row dispatched.
	WorkflowID string
}

// RecordPaymentFailed records the refusal, marks the order payment_failed and
// inserts the processed row in one statement. Idempotent like
// RecordPaymentSucceeded.
func (s *Store) RecordPaymentFailed(ctx context.Context, f PaymentFailure) (already bool, err error) {
	result := map[string]any{"code": f.Code, "decline_code": f.DeclineCode}
	already, err = s.settleAnd(ctx, recordRefusedSQL, f.Key, f.Claim, StateFailed, f.PaymentIntentID, result, f.Message,
		f.Consumer, f.MessageID, f.OrderID, f.Code, f.DeclineCode, f.StripeStatus, f.WorkflowID)
	if err != nil {
		return false, fmt.Errorf("record failed payment of order %d: %w", f.OrderID, err)
	}
	return already, nil
}

// recordRefusedSQL settles the payment's ledger row as failed and, in the
// same statement, records the refusal ($7 consumer, $8 message ID, $9 order
// ID, $10 failure code, $11 decline code, $12 Stripe status), marks the order payment_failed,
// inserts the processed row and marks the inbox row dispatched by workflow
// $13 (recordMarksDispatched).
var recordRefusedSQL = settleCTE + recordMarksDispatched("$13") + refusedSQL

// refusedSQL follows a settle CTE: see recordRefusedSQL.
var refusedSQL = `, refused AS (
		UPDATE payments SET state = 'failed', payment_intent_id = coalesce(nullif($4::text, ''), payment_intent_id), failure_code = nullif($10::text, ''),
		       decline_code = nullif($11::text, ''), failure_message = nullif($6::text, ''),
		       stripe_status = coalesce(nullif($12::text, ''), stripe_status), updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND EXISTS (SELECT FROM settled)
	)` + orderOutcomeCTEs(OutcomePaymentFailed, "") + `
	SELECT count(*) FROM settled`

// orderOutcomeCTEs sets the order's ($9) status to outcome (and the
// assignments in set, when not empty) and inserts the message's ($7
// consumer, $8 message ID) processed row with that outcome, when the ledger
// row was settled.
func orderOutcomeCTEs(outcome Outcome, set string) string {
	if set != "" {
		set = ", " + set
	}
	return `, ord AS (
		UPDATE orders SET status = '` + string(outcome) + `'` + set + `, updated_at = now() WHERE id = $9 AND EXISTS (SELECT FROM settled)
	), processed AS (
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		SELECT $7::text, $8::text, '` + string(outcome) + `', $9::bigint WHERE EXISTS (SELECT FROM settled)
	)`
}

// PaymentOf returns the payment row of message (consumer, messageID).
func (s *Store) PaymentOf(ctx context.Context, consumer, messageID string) (Payment, error) {
	p, err := scanPaymentFull(s.pool.QueryRow(ctx, `SELECT `+paymentColumnsFull+` FROM payments WHERE consumer = $1 AND message_id = $2`, consumer, messageID))
	if err != nil {
		return Payment{}, fmt.Errorf("payment of %s: %w", messageID, err)
	}
	return p, nil
}

// RecordPaymentUnknown records that the payment's outcome could not be
// established. No processed row is written: the message is not done, and an
// operator decides.
func (s *Store) RecordPaymentUnknown(ctx context.Context, consumer, messageID, key string, claim int32, reason string) error {
	if _, err := s.settleAnd(ctx, recordUnknownSQL, key, claim, StateUnknown, "", nil, reason, consumer, messageID); err != nil {
		return fmt.Errorf("mark payment of %s unknown: %w", messageID, err)
	}
	return nil
}

// recordUnknownSQL settles the payment's ledger row as unknown and, in the
// same statement, marks the message's ($7 consumer, $8 message ID) payment
// unknown with the reason ($6).
const recordUnknownSQL = settleCTE + `, unknown AS (
		UPDATE payments SET state = 'unknown', failure_message = $6, updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND EXISTS (SELECT FROM settled)
	)
	SELECT count(*) FROM settled`
