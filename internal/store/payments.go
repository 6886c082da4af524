package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Order statuses.
const (
	OrderPending       = "pending"
	OrderPaid          = "paid"
	OrderPaymentFailed = "payment_failed"
)

// Outcomes recorded in processed_messages.
const (
	OutcomePaid              = "paid"
	OutcomePaymentFailed     = "payment_failed"
	OutcomeBusinessDuplicate = "business_duplicate"
)

// Payment states.
const (
	PaymentClaimed   = "claimed"
	PaymentSucceeded = "succeeded"
	PaymentFailed    = "failed"
	PaymentUnknown   = "unknown"
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
	Attempt     int32
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
	// ClaimFenced: a newer attempt of this activity owns the ledger row.
	ClaimFenced ClaimOutcome = "fenced"
)

// Payment is a payments row.
type Payment struct {
	OrderID         int64     `json:"order_id"`
	Consumer        string    `json:"consumer"`
	MessageID       string    `json:"message_id"`
	Key             string    `json:"idempotency_key"`
	State           string    `json:"state"`
	Amount          int64     `json:"amount"`
	Currency        string    `json:"currency"`
	PaymentIntentID string    `json:"payment_intent_id,omitempty"`
	ChargeID        string    `json:"charge_id,omitempty"`
	FailureCode     string    `json:"failure_code,omitempty"`
	DeclineCode     string    `json:"decline_code,omitempty"`
	FailureMessage  string    `json:"failure_message,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// ClaimResult is what ClaimPayment found or did.
type ClaimResult struct {
	Outcome ClaimOutcome
	// Payment is the order's payment row: this message's, or for
	// ClaimBusinessDuplicate the one held by the other message.
	Payment Payment
}

const paymentColumns = `order_id, consumer, message_id, idempotency_key, state, amount, currency,
	coalesce(payment_intent_id, ''), coalesce(charge_id, ''), coalesce(failure_code, ''),
	coalesce(decline_code, ''), coalesce(failure_message, ''), created_at, updated_at`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	err := row.Scan(&p.OrderID, &p.Consumer, &p.MessageID, &p.Key, &p.State, &p.Amount, &p.Currency,
		&p.PaymentIntentID, &p.ChargeID, &p.FailureCode, &p.DeclineCode, &p.FailureMessage, &p.CreatedAt, &p.UpdatedAt)
	return p, translate(err)
}

// ClaimPayment claims order c.OrderID's payment for message c.MessageID in
// one transaction, before any call to Stripe. The unique payments.order_id is
// the business key: when another message already holds the order, the claim
// records this message as a business duplicate (its processed row commits in
// the same transaction) and returns ClaimBusinessDuplicate, so the caller
// never charges.
func (s *Store) ClaimPayment(ctx context.Context, c PaymentClaim) (ClaimResult, error) {
	var res ClaimResult
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
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
			RequestHash: c.RequestHash, Attempt: c.Attempt, State: StateClaimed,
		})
		if err != nil {
			return err
		}
		switch {
		case owned:
			res.Outcome = ClaimOwned
		case e.Terminal():
			res.Outcome = ClaimDone
		default:
			res.Outcome = ClaimFenced
		}
		return nil
	})
	return res, err
}

// PaymentSuccess records a charge that Stripe confirmed.
type PaymentSuccess struct {
	Consumer        string
	MessageID       string
	OrderID         int64
	Key             string
	Attempt         int32
	PaymentIntentID string
	ChargeID        string
	Amount          int64
	Currency        string
	// Reconciled is true when the charge was found by lookup rather than
	// returned by the create call.
	Reconciled bool
}

// RecordPaymentSucceeded records the charge, marks the order paid, inserts the
// message's processed row and the order.paid outbox event, all in one
// transaction. Repeating it after it committed is a no-op that reports
// already=true; an attempt that lost its claim gets ErrFenced.
func (s *Store) RecordPaymentSucceeded(ctx context.Context, r PaymentSuccess) (already bool, err error) {
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		result := map[string]any{"payment_intent_id": r.PaymentIntentID, "charge_id": r.ChargeID, "reconciled": r.Reconciled}
		already, err = settleEffect(ctx, tx, r.Key, r.Attempt, StateSucceeded, r.PaymentIntentID, result, "")
		if err != nil || already {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE payments SET state = 'succeeded', payment_intent_id = $3, charge_id = nullif($4, ''), updated_at = now()
			 WHERE consumer = $1 AND message_id = $2`,
			r.Consumer, r.MessageID, r.PaymentIntentID, r.ChargeID); err != nil {
			return fmt.Errorf("record payment of order %d: %w", r.OrderID, translate(err))
		}
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $1`, r.OrderID); err != nil {
			return fmt.Errorf("mark order %d paid: %w", r.OrderID, translate(err))
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ($1, $2, 'paid', $3)`,
			r.Consumer, r.MessageID, r.OrderID); err != nil {
			return fmt.Errorf("record processed message %s: %w", r.MessageID, translate(err))
		}
		event := map[string]any{
			"type": "order.paid", "order_id": r.OrderID, "message_id": r.MessageID,
			"payment_intent_id": r.PaymentIntentID, "amount": r.Amount, "currency": r.Currency,
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO outbox (event_id, topic, payload) VALUES ($1, 'order.paid', $2)
			ON CONFLICT (event_id) DO NOTHING`, OrderPaidEventID(r.MessageID), event); err != nil {
			return fmt.Errorf("write order.paid event for order %d: %w", r.OrderID, translate(err))
		}
		return nil
	})
	return already, err
}

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
	Attempt     int32
	Code        string
	DeclineCode string
	Message     string
	// PaymentIntentID is set when Stripe created the PaymentIntent before
	// declining it.
	PaymentIntentID string
}

// RecordPaymentFailed records the refusal, marks the order payment_failed and
// inserts the processed row in one transaction. Idempotent like
// RecordPaymentSucceeded.
func (s *Store) RecordPaymentFailed(ctx context.Context, f PaymentFailure) (already bool, err error) {
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		result := map[string]any{"code": f.Code, "decline_code": f.DeclineCode}
		already, err = settleEffect(ctx, tx, f.Key, f.Attempt, StateFailed, f.PaymentIntentID, result, f.Message)
		if err != nil || already {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE payments SET state = 'failed', payment_intent_id = nullif($3, ''), failure_code = nullif($4, ''),
			       decline_code = nullif($5, ''), failure_message = nullif($6, ''), updated_at = now()
			 WHERE consumer = $1 AND message_id = $2`,
			f.Consumer, f.MessageID, f.PaymentIntentID, f.Code, f.DeclineCode, f.Message); err != nil {
			return fmt.Errorf("record failed payment of order %d: %w", f.OrderID, translate(err))
		}
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'payment_failed', updated_at = now() WHERE id = $1`, f.OrderID); err != nil {
			return fmt.Errorf("mark order %d payment_failed: %w", f.OrderID, translate(err))
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ($1, $2, 'payment_failed', $3)`,
			f.Consumer, f.MessageID, f.OrderID); err != nil {
			return fmt.Errorf("record processed message %s: %w", f.MessageID, translate(err))
		}
		return nil
	})
	return already, err
}

// PaymentOf returns the payment row of message (consumer, messageID).
func (s *Store) PaymentOf(ctx context.Context, consumer, messageID string) (Payment, error) {
	p, err := scanPayment(s.pool.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE consumer = $1 AND message_id = $2`, consumer, messageID))
	if err != nil {
		return Payment{}, fmt.Errorf("payment of %s: %w", messageID, err)
	}
	return p, nil
}

// RecordPaymentUnknown records that the payment's outcome could not be
// established. No processed row is written: the message is not done, and an
// operator decides.
func (s *Store) RecordPaymentUnknown(ctx context.Context, consumer, messageID, key string, attempt int32, reason string) error {
	return WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := settleEffect(ctx, tx, key, attempt, StateUnknown, "", nil, reason); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE payments SET state = 'unknown', failure_message = $3, updated_at = now()
			WHERE consumer = $1 AND message_id = $2`, consumer, messageID, reason); err != nil {
			return fmt.Errorf("mark payment of %s unknown: %w", messageID, translate(err))
		}
		return nil
	})
}
