package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrRefundNotRecorded is returned by UpdateRefund for a refund whose
// message's refund is still claimed: the attempt that created it has not
// recorded its ID yet, so the update cannot be applied now (a webhook asks
// Stripe to send it again).
var ErrRefundNotRecorded = errors.New("the refund's creation is not recorded yet")

// RefundUpdate is what Stripe says a refund it created became: a
// charge.refund.updated event, or the refund as retrieved.
type RefundUpdate struct {
	// RefundID is the Refund's ID, re_...
	RefundID string
	// Key is the refund's idempotency key ("refund:<message id>", from its
	// metadata): it finds a refund whose ID is not recorded yet. Optional.
	Key string
	// Status is the Refund's status: pending, requires_action, succeeded,
	// failed or canceled.
	Status string
	// FailureReason is Stripe's failure_reason of a failed refund.
	FailureReason string
	// Source says who read it, for the failure message ("charge.refund.updated
	// evt_…", "retrieve").
	Source string
}

// RefundUpdateResult is what UpdateRefund did.
type RefundUpdateResult struct {
	// Found: a refunds row records the refund.
	Found bool
	// Before is the row's state before, Refund the row after.
	Before RefundState
	Refund Refund
	// Changed: the row's state moved.
	Changed bool
}

// Reversed reports whether the update failed a refund that had succeeded:
// money the ledger, and a receipt, said was back with the customer is not.
func (r RefundUpdateResult) Reversed() bool {
	return r.Changed && r.Before == RefundSucceeded && r.Refund.State == RefundFailed
}

// Unrecorded reports whether Stripe holds, under the message's key, a
// refund that did not fail while the ledger recorded the message's refund
// failed with no refund ID (not created, its amount given back): money may
// have left twice. Nothing is changed; an operator looks.
func (r RefundUpdateResult) Unrecorded(status string) bool {
	return r.Found && !r.Changed && r.Refund.State == RefundFailed && r.Refund.RefundID == "" &&
		status != "failed" && status != "canceled"
}

// UpdateRefund records what Stripe says a refund became (ApplyRefundUpdate),
// in a transaction of its own.
func (s *Store) UpdateRefund(ctx context.Context, u RefundUpdate) (RefundUpdateResult, error) {
	var res RefundUpdateResult
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = ApplyRefundUpdate(ctx, tx, u)
		return err
	})
	return res, err
}

// ApplyRefundUpdate records inside tx what Stripe says a refund became. Only
// forward moves are written, so events in any order and any number of
// copies leave the row where the latest of them put it: a pending refund
// becomes succeeded or failed (canceled counts as failed), or takes a new
// pending status; a succeeded one becomes failed. A failed refund gives its
// amount back to its payment, the message's processed outcome follows the
// refund (refunded, refund_failed) and the outbox gets refund.refunded or
// refund.failed, in the same statement. A refund no row records is not an
// error (Found false): it may be another system's. A refund whose message's
// row is still claimed wraps ErrRefundNotRecorded.
func ApplyRefundUpdate(ctx context.Context, tx pgx.Tx, u RefundUpdate) (RefundUpdateResult, error) {
	var res RefundUpdateResult
	if u.RefundID == "" || u.Status == "" {
		return res, fmt.Errorf("update refund: a refund ID and a status are required")
	}
	msg := ""
	if u.Status == "failed" || u.Status == "canceled" {
		msg = "stripe reports the refund " + u.Status
		if u.FailureReason != "" {
			msg += " (" + u.FailureReason + ")"
		}
		if u.Source != "" {
			msg += ", from " + u.Source
		}
	}
	var before, after *string
	// Lock first, in a statement of its own: under READ COMMITTED the
	// update's statement then takes a snapshot that sees a record that
	// committed while this one waited on the row lock.
	if _, err := tx.Exec(ctx, `SELECT FROM refunds WHERE refund_id = $1 OR (refund_id IS NULL AND idempotency_key = nullif($2::text, '')) FOR UPDATE`, u.RefundID, u.Key); err != nil {
		return res, fmt.Errorf("lock refund %s: %w", u.RefundID, translate(err))
	}
	err := tx.QueryRow(ctx, updateRefundSQL, u.RefundID, u.Status, u.FailureReason, msg, u.Key).Scan(&before, &after)
	if err = translate(err); err != nil {
		if errors.Is(err, ErrNotFound) {
			return res, nil
		}
		return res, fmt.Errorf("update refund %s to %s: %w", u.RefundID, u.Status, err)
	}
	res.Found, res.Before = true, RefundState(*before)
	if res.Before == RefundClaimed {
		return res, fmt.Errorf("update refund %s to %s: %w", u.RefundID, u.Status, ErrRefundNotRecorded)
	}
	res.Changed = after != nil && *after != *before
	if res.Refund, err = scanRefund(tx.QueryRow(ctx, `SELECT `+refundColumns+` FROM refunds
		 WHERE refund_id = $1 OR (refund_id IS NULL AND idempotency_key = nullif($2::text, '')) LIMIT 1`, u.RefundID, u.Key)); err != nil {
		return res, fmt.Errorf("read refund %s: %w", u.RefundID, err)
	}
	return res, nil
}

// updateRefundSQL applies a refund's new Stripe status ($2; $3 its
// failure reason, $4 the failure message) to the row of refund $1, or of
// the key $5 while no refund ID is recorded for it. It returns the row's
// state before, and after (NULL when nothing was written); no row when none
// matches.
const updateRefundSQL = `
	WITH cur AS (
		SELECT consumer, message_id, state FROM refunds
		 WHERE refund_id = $1 OR (refund_id IS NULL AND idempotency_key = nullif($5::text, ''))
		 LIMIT 1
		   FOR UPDATE
	), upd AS (
		UPDATE refunds r SET
		       state = CASE WHEN $2::text = 'succeeded' THEN 'succeeded'
		                    WHEN $2::text IN ('failed', 'canceled') THEN 'failed' ELSE r.state END,
		       refund_status = $2::text,
		       failure_code = CASE WHEN $2::text IN ('failed', 'canceled') THEN 'refund_' || coalesce(nullif($3::text, ''), $2::text)
		                           ELSE r.failure_code END,
		       failure_message = CASE WHEN $2::text IN ('failed', 'canceled') THEN $4::text ELSE r.failure_message END,
		       updated_at = now()
		  FROM cur
		 WHERE r.consumer = cur.consumer AND r.message_id = cur.message_id AND r.refund_id = $1
		   AND ((r.state = 'pending' AND $2::text IN ('pending', 'requires_action', 'succeeded', 'failed', 'canceled')
		         AND r.refund_status IS DISTINCT FROM $2::text)
		     OR (r.state = 'succeeded' AND $2::text IN ('failed', 'canceled')))
		RETURNING r.consumer, r.message_id, r.order_id, r.amount, r.currency, r.payment_intent_id, r.state, r.failure_code, cur.state AS before
	), released AS (
		UPDATE payments p SET refunded_amount = p.refunded_amount - upd.amount
		  FROM upd WHERE upd.state = 'failed' AND p.order_id = upd.order_id
	), outcome AS (
		UPDATE processed_messages pm SET outcome = CASE upd.state WHEN 'failed' THEN 'refund_failed' ELSE 'refunded' END
		  FROM upd WHERE upd.state <> upd.before AND pm.consumer = upd.consumer AND pm.message_id = upd.message_id
	), event AS (
		INSERT INTO outbox (event_id, topic, payload)
		SELECT t.topic || ':' || upd.message_id, t.topic, jsonb_strip_nulls(jsonb_build_object('type', t.topic,
		       'consumer', upd.consumer, 'message_id', upd.message_id, 'order_id', upd.order_id,
		       'outcome', CASE upd.state WHEN 'failed' THEN 'refund_failed' ELSE 'refunded' END,
		       'refund_id', $1::text, 'payment_intent_id', upd.payment_intent_id, 'amount', upd.amount,
		       'currency', upd.currency, 'failure_code', upd.failure_code, 'was', upd.before))
		  FROM upd, LATERAL (SELECT CASE upd.state WHEN 'failed' THEN 'refund.failed' ELSE 'refund.refunded' END AS topic) t
		 WHERE upd.state <> upd.before
		ON CONFLICT (event_id) DO NOTHING
	)
	SELECT cur.state, (SELECT state FROM upd) FROM cur`
