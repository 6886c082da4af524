package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Create, confirm, record: the payment activity records the PaymentIntent's
// ID with the confirmation's outcome, in the same statement. Only a
// PaymentIntent found by a list (a retry past the key window, an ambiguous
// create) has its ID recorded on its own before it is confirmed
// (RecordPaymentIntentID). A confirmation that leaves the payment
// processing or in a status nobody asked for is recorded as such
// (RecordPaymentProcessing, RecordPaymentUnexpected): open cases, which
// SettlePayment later settles from what Stripe says.

// RecordPaymentIntentID records the PaymentIntent found for the payment of
// message (consumer, messageID) under the claim, before it is confirmed:
// once the ID is in Postgres, every later attempt confirms or reads that
// PaymentIntent and no other. The payment must still be claimed
// under claim (else ErrFenced); an ID already recorded must be the same
// (else ErrMismatch). Recording the same ID again is a no-op.
func (s *Store) RecordPaymentIntentID(ctx context.Context, consumer, messageID, key string, claim int32, paymentIntentID string) error {
	var recorded string
	err := s.pool.QueryRow(ctx, `
		WITH owner AS (
			UPDATE effects SET provider_ref = $4, updated_at = now()
			 WHERE key = $3 AND claim = $5 AND state = 'claimed'
			RETURNING key
		)
		UPDATE payments SET payment_intent_id = coalesce(payment_intent_id, $4), updated_at = now()
		 WHERE consumer = $1 AND message_id = $2 AND EXISTS (SELECT FROM owner)
		RETURNING payment_intent_id`, consumer, messageID, key, paymentIntentID, claim).Scan(&recorded)
	if err = translate(err); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("record payment intent %s of %s under claim %d: %w", paymentIntentID, messageID, claim, ErrFenced)
		}
		return fmt.Errorf("record payment intent %s of %s: %w", paymentIntentID, messageID, err)
	}
	if recorded != paymentIntentID {
		return fmt.Errorf("record payment intent %s of %s: %s is recorded: %w", paymentIntentID, messageID, recorded, ErrMismatch)
	}
	return nil
}

// PaymentOpen records a payment whose confirmation left it processing or
// in an unexpected status.
type PaymentOpen struct {
	Consumer        string
	MessageID       string
	Key             string
	Claim           int32 // the fencing token ClaimPayment returned
	PaymentIntentID string
	// StripeStatus is the PaymentIntent's status.
	StripeStatus string
	// Reason explains an unexpected status, for the operator.
	Reason string
}

// RecordPaymentProcessing records that Stripe is processing the payment:
// no outcome yet, no processed row. Idempotent like RecordPaymentSucceeded.
func (s *Store) RecordPaymentProcessing(ctx context.Context, p PaymentOpen) (already bool, err error) {
	return s.recordOpen(ctx, PaymentProcessing, p)
}

// RecordPaymentUnexpected records that the PaymentIntent is in a status
// effectively never asks for (requires_capture, …): an operator decides.
// No processed row is written.
func (s *Store) RecordPaymentUnexpected(ctx context.Context, p PaymentOpen) (already bool, err error) {
	return s.recordOpen(ctx, PaymentUnexpected, p)
}

func (s *Store) recordOpen(ctx context.Context, state PaymentState, p PaymentOpen) (bool, error) {
	result := map[string]any{"payment_intent_id": p.PaymentIntentID, "status": p.StripeStatus}
	already, err := s.settleAnd(ctx, settleCTE+openSQL, p.Key, p.Claim, EffectState(state), p.PaymentIntentID, result, p.Reason,
		p.Consumer, p.MessageID, p.StripeStatus)
	if err != nil {
		return false, fmt.Errorf("record payment of %s as %s: %w", p.MessageID, state, err)
	}
	return already, nil
}

// openSQL follows a settle CTE: it sets the payment of message ($7
// consumer, $8 message ID) to the settled state ($3), with the
// PaymentIntent ($4), its Stripe status ($9) and the reason ($6).
const openSQL = `, open AS (
		UPDATE payments SET state = $3, payment_intent_id = coalesce(nullif($4::text, ''), payment_intent_id),
		       stripe_status = nullif($9::text, ''), failure_message = nullif($6::text, ''), updated_at = now()
		 WHERE consumer = $7 AND message_id = $8 AND EXISTS (SELECT FROM settled)
	)
	SELECT count(*) FROM settled`

// Settlement is what Stripe says about a payment that is not settled in
// Postgres yet, to be recorded by SettlePayment.
type Settlement struct {
	Payment Payment // the payments row as read (consumer, message, order, key, amount, currency)
	// State is PaymentSucceeded, PaymentFailed, PaymentProcessing or
	// PaymentUnexpected.
	State           PaymentState
	PaymentIntentID string
	ChargeID        string
	StripeStatus    string
	FailureCode     string
	DeclineCode     string
	// Message explains the outcome for the operator.
	Message string
}

// settleOpenCTE settles a ledger row ($1 key) from any open state, without
// a claim ($2 must be 0): the truth comes from Stripe, so whoever reads it
// first (the workflow's retrieve, a webhook, an operator) may write it. A
// final row (succeeded, failed) never moves.
const settleOpenCTE = `
	WITH settled AS (
		UPDATE effects
		   SET state = $3, provider_ref = nullif($4::text, ''), result = $5::jsonb, error = nullif($6::text, ''), updated_at = now()
		 WHERE key = $1 AND $2::int = 0 AND state IN ('claimed', 'in_flight', 'processing', 'unknown', 'unexpected')
		   AND state <> $3
		RETURNING key
	)`

// SettlePayment records what Stripe says about an open payment (claimed,
// processing, unknown, unexpected): succeeded marks the order paid and
// writes the processed row and the order.paid event, failed marks it
// payment_failed with its processed row, processing and unexpected keep it
// open. The same settlement again reports already=true; a payment that is
// already final with another outcome, or already in another state, is
// ErrFenced and is not changed.
func (s *Store) SettlePayment(ctx context.Context, st Settlement) (already bool, err error) {
	p := st.Payment
	switch st.State {
	case PaymentSucceeded:
		result := map[string]any{"payment_intent_id": st.PaymentIntentID, "charge_id": st.ChargeID, "reconciled": true}
		event := map[string]any{
			"type": "order.paid", "order_id": p.OrderID, "message_id": p.MessageID,
			"payment_intent_id": st.PaymentIntentID, "amount": p.Amount, "currency": p.Currency,
		}
		already, err = s.settleAnd(ctx, settleOpenCTE+paidSQL, p.Key, 0, StateSucceeded, st.PaymentIntentID, result, "",
			p.Consumer, p.MessageID, p.OrderID, st.ChargeID, OrderPaidEventID(p.MessageID), event)
	case PaymentFailed:
		result := map[string]any{"code": st.FailureCode, "decline_code": st.DeclineCode}
		already, err = s.settleAnd(ctx, settleOpenCTE+refusedSQL, p.Key, 0, StateFailed, st.PaymentIntentID, result, st.Message,
			p.Consumer, p.MessageID, p.OrderID, st.FailureCode, st.DeclineCode, st.StripeStatus)
	case PaymentProcessing, PaymentUnexpected:
		result := map[string]any{"payment_intent_id": st.PaymentIntentID, "status": st.StripeStatus}
		already, err = s.settleAnd(ctx, settleOpenCTE+openSQL, p.Key, 0, EffectState(st.State), st.PaymentIntentID, result, st.Message,
			p.Consumer, p.MessageID, st.StripeStatus)
	default:
		return false, fmt.Errorf("settle payment of %s: state %q cannot be settled", p.MessageID, st.State)
	}
	if err != nil {
		return false, fmt.Errorf("settle payment of %s as %s: %w", p.MessageID, st.State, err)
	}
	return already, nil
}

// OpenPaymentStates are the states OpenPayments lists: cases that wait for
// Stripe or for an operator.
var OpenPaymentStates = []PaymentState{PaymentProcessing, PaymentUnknown, PaymentUnexpected}

// OpenPayments lists the payments in state (one of OpenPaymentStates),
// oldest first, at most limit.
func (s *Store) OpenPayments(ctx context.Context, state PaymentState, limit int) ([]Payment, error) {
	if !slices.Contains(OpenPaymentStates, state) {
		return nil, fmt.Errorf("open payments: state %q is not one of %v", state, OpenPaymentStates)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+paymentColumnsFull+` FROM payments WHERE state = $1 ORDER BY updated_at LIMIT $2`, state, limit)
	if err != nil {
		return nil, fmt.Errorf("open payments: %w", translate(err))
	}
	defer rows.Close()
	out := []Payment{}
	for rows.Next() {
		p, err := scanPaymentFull(rows)
		if err != nil {
			return nil, fmt.Errorf("open payments: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("open payments: %w", translate(err))
	}
	return out, nil
}

// RefundSettlement is what Stripe says about a claimed refund, to be
// recorded by SettleRefund.
type RefundSettlement struct {
	Refund Refund // the refunds row as read (consumer, message, order, key)
	// State is RefundSucceeded or RefundFailed.
	State    RefundState
	RefundID string
	// Status is the Refund's Stripe status; Code and Message explain a
	// failure (Code "not_created" when Stripe holds no refund for it).
	Status, Code, Message string
}

// SettleRefund records what Stripe says about a claimed refund, without a
// claim (like SettlePayment): succeeded records the Refund and the
// processed row; failed gives its amount back to the payment and records
// refund_failed. The same settlement again reports already=true; a refund
// that is already final otherwise is ErrFenced and is not changed.
func (s *Store) SettleRefund(ctx context.Context, st RefundSettlement) (already bool, err error) {
	r := st.Refund
	switch st.State {
	case RefundSucceeded:
		already, err = s.settleAnd(ctx, settleOpenCTE+refundedSQL, r.Key, 0, StateSucceeded, st.RefundID,
			map[string]any{"refund_id": st.RefundID, "status": st.Status, "reconciled": true}, "",
			r.Consumer, r.MessageID, r.OrderID, st.Status)
	case RefundFailed:
		already, err = s.settleAnd(ctx, settleOpenCTE+refundFailedSQL, r.Key, 0, StateFailed, "",
			map[string]any{"code": st.Code, "reconciled": true}, st.Message,
			r.Consumer, r.MessageID, r.OrderID, st.Code)
	default:
		return false, fmt.Errorf("settle refund of %s: state %q cannot be settled", r.MessageID, st.State)
	}
	if err != nil {
		return false, fmt.Errorf("settle refund of %s as %s: %w", r.MessageID, st.State, err)
	}
	return already, nil
}

// SettleReceipt records a mail that SendGrid's events prove it accepted
// (xMessageID, the X-Message-Id part of its sg_message_id), without a
// claim: a receipt claimed, in flight or unknown becomes succeeded, and the
// order's (orderID; 0 for a refund receipt) receipt status sent unless an
// event moved it further. Idempotent like SettlePayment.
func (s *Store) SettleReceipt(ctx context.Context, key string, orderID int64, xMessageID string) (already bool, err error) {
	already, err = s.settleAnd(ctx, settleOpenCTE+markReceiptSQL, key, 0, StateSucceeded, xMessageID,
		map[string]any{"x_message_id": xMessageID, "settled_by": "sendgrid events (starter resolve)"}, "", orderID, ReceiptSent)
	if err != nil {
		return false, fmt.Errorf("settle receipt %s: %w", key, err)
	}
	return already, nil
}
