package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/failpoint"
	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/store"
)

// ChargeInput is what ChargeOrder needs: everything comes from the message,
// so every attempt sends Stripe identical parameters.
type ChargeInput struct {
	Consumer      string `json:"consumer"`
	MessageID     string `json:"message_id"`
	OrderID       int64  `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// PaymentOutcome is the outcome of ChargeOrder.
type PaymentOutcome string

// Payment outcomes returned by ChargeOrder.
const (
	PaymentPaid              PaymentOutcome = "paid"
	PaymentDeclined          PaymentOutcome = "payment_failed"
	PaymentBusinessDuplicate PaymentOutcome = "business_duplicate"
)

// ChargeResult is the recorded outcome of ChargeOrder.
type ChargeResult struct {
	// Outcome is PaymentPaid, PaymentDeclined or PaymentBusinessDuplicate.
	Outcome         PaymentOutcome `json:"outcome"`
	PaymentIntentID string         `json:"payment_intent_id,omitempty"`
	// FailureCode and DeclineCode explain a PaymentDeclined.
	FailureCode string `json:"failure_code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	// HeldBy is the message that holds the order, for a business duplicate.
	HeldBy string `json:"held_by,omitempty"`
	// Replayed is true when Stripe answered from its idempotency layer, and
	// Recorded when the outcome was already in Postgres (no call made).
	Replayed   bool `json:"replayed,omitempty"`
	Recorded   bool `json:"recorded,omitempty"`
	Reconciled bool `json:"reconciled,omitempty"`
}

// ChargeOrder charges the order of one message exactly once.
//
// Safe to retry: the order is claimed in Postgres first (payments.order_id is
// unique), Stripe is called with the key "payment:<message id>" (a repeat is
// replayed, never charged again), and the outcome commits with the message's
// processed row in one transaction. A declined card or an invalid request is
// a recorded outcome, not an error. Transport errors, 409, 429 and 5xx are
// returned as retryable errors; an ambiguous answer (Stripe replays a 500
// under the key) is reconciled by looking the payment up before anything
// else.
func (a *Activities) ChargeOrder(ctx context.Context, in ChargeInput) (ChargeResult, error) {
	key, err := identity.Key(identity.EffectPayment, in.MessageID)
	if err != nil {
		return ChargeResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}
	logger := activity.GetLogger(ctx)

	claim, err := a.Store.ClaimPayment(ctx, store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: in.Currency, Key: key,
		RequestHash: requestHash(in),
	})
	if err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("claim order %d: %w", in.OrderID, err))
	}
	switch claim.Outcome {
	case store.ClaimBusinessDuplicate:
		logger.Info("order already claimed by another message", "order_id", in.OrderID, "held_by", claim.Payment.MessageID)
		return ChargeResult{Outcome: PaymentBusinessDuplicate, HeldBy: claim.Payment.MessageID}, nil
	case store.ClaimDone:
		return recordedCharge(claim.Payment)
	case store.ClaimOwned: // charge below
	}
	token := claim.Claim

	failpoint.Hit(failpoint.PaymentAfterClaim)
	if age := a.now().Sub(claim.Payment.CreatedAt); age > a.keyTrust() {
		// Stripe may have forgotten the key: a repeat would be a new charge.
		// Establish first that no charge exists.
		found, err := a.Payments.FindByMessageID(ctx, in.MessageID)
		switch {
		case err == nil && found.Succeeded():
			activity.GetLogger(ctx).Warn("claim older than the key window: charge found by lookup", "order_id", in.OrderID, "age", age.String())
			return a.recordCharge(ctx, in, key, token, found, true)
		case err != nil && !errors.Is(err, payment.ErrNotFound):
			return ChargeResult{}, fmt.Errorf("look up payment of order %d before a charge past the key window: %w", in.OrderID, err)
		}
	}
	req := payment.ChargeRequest{
		IdempotencyKey: key, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: in.Currency, PaymentMethod: in.PaymentMethod,
	}
	ch, err := a.Payments.Charge(ctx, req)
	if err == nil {
		failpoint.Hit(failpoint.PaymentAfterCharge)
		res, err := a.recordCharge(ctx, in, key, token, ch, false)
		if err == nil {
			failpoint.Hit(failpoint.PaymentAfterRecord)
		}
		return res, err
	}
	var pe *payment.Error
	if errors.As(err, &pe) && (pe.HTTPStatus == http.StatusUnauthorized || pe.HTTPStatus == http.StatusForbidden) {
		// A wrong or revoked API key is our configuration, not the order's
		// outcome: retry (with backoff) until an operator fixes it.
		return ChargeResult{}, fmt.Errorf("charge order %d: stripe refused the API key (fix STRIPE_API_KEY): %w", in.OrderID, err)
	}
	switch payment.Classify(err) {
	case payment.ClassDeclined, payment.ClassInvalid:
		return a.recordDecline(ctx, in, key, token, err)
	case payment.ClassIdempotencyMismatch:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError("stripe refused the key: same key, different parameters", ErrTypeIdempotencyMismatch, err)
	case payment.ClassAmbiguous:
		return a.reconcile(ctx, in, key, token, err)
	default:
		// In flight (409), rate limited (429), transport errors, 5xx: retry
		// with backoff under the same key.
		return ChargeResult{}, fmt.Errorf("charge order %d: %w", in.OrderID, err)
	}
}

// recordedCharge returns the outcome already in Postgres, without a call.
func recordedCharge(p store.Payment) (ChargeResult, error) {
	r := ChargeResult{PaymentIntentID: p.PaymentIntentID, Recorded: true}
	switch p.State {
	case store.PaymentSucceeded:
		r.Outcome = PaymentPaid
	case store.PaymentFailed:
		r.Outcome = PaymentDeclined
		r.FailureCode, r.DeclineCode = p.FailureCode, p.DeclineCode
	default:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is recorded as %s: operator action needed", p.OrderID, p.State), ErrTypePaymentUnknown, nil)
	}
	return r, nil
}

func (a *Activities) recordCharge(ctx context.Context, in ChargeInput, key string, token int32, ch *payment.Charge, reconciled bool) (ChargeResult, error) {
	_, err := a.Store.RecordPaymentSucceeded(ctx, store.PaymentSuccess{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token,
		PaymentIntentID: ch.PaymentIntentID, ChargeID: ch.ChargeID, Amount: in.Amount, Currency: in.Currency,
		Reconciled: reconciled,
	})
	if err != nil {
		// The charge exists at Stripe; a retry replays it under the key and
		// records it then.
		return ChargeResult{}, fenced(fmt.Errorf("record payment of order %d: %w", in.OrderID, err))
	}
	return ChargeResult{Outcome: PaymentPaid, PaymentIntentID: ch.PaymentIntentID, Replayed: ch.Replayed, Reconciled: reconciled}, nil
}

func (a *Activities) recordDecline(ctx context.Context, in ChargeInput, key string, token int32, cause error) (ChargeResult, error) {
	var (
		pe *payment.Error
		f  store.PaymentFailure
	)
	if errors.As(cause, &pe) {
		f.Code, f.DeclineCode, f.Message = pe.Code, pe.DeclineCode, pe.Message
	}
	if f.Code == "" {
		f.Code = string(payment.Classify(cause))
	}
	return a.recordRefusal(ctx, in, key, token, f)
}

// recordRefusal records a refused payment as the order's final outcome.
func (a *Activities) recordRefusal(ctx context.Context, in ChargeInput, key string, token int32, f store.PaymentFailure) (ChargeResult, error) {
	f.Consumer, f.MessageID, f.OrderID, f.Key, f.Claim = in.Consumer, in.MessageID, in.OrderID, key, token
	if _, err := a.Store.RecordPaymentFailed(ctx, f); err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("record declined payment of order %d: %w", in.OrderID, err))
	}
	activity.GetLogger(ctx).Info("payment refused", "order_id", in.OrderID, "code", f.Code, "decline_code", f.DeclineCode)
	return ChargeResult{Outcome: PaymentDeclined, FailureCode: f.Code, DeclineCode: f.DeclineCode}, nil
}

// reconcile settles an ambiguous answer by looking the payment up by its
// message ID. A charge found is recorded; none found is retried a few times
// (search results can lag; token counts the claims, so the tries of the
// local and the regular activity add up) and then recorded as unknown for
// an operator. It never charges again on a guess.
func (a *Activities) reconcile(ctx context.Context, in ChargeInput, key string, token int32, cause error) (ChargeResult, error) {
	ch, err := a.Payments.FindByMessageID(ctx, in.MessageID)
	switch {
	case err == nil && ch.Succeeded():
		activity.GetLogger(ctx).Warn("ambiguous stripe answer reconciled by lookup", "order_id", in.OrderID, "payment_intent_id", ch.PaymentIntentID)
		return a.recordCharge(ctx, in, key, token, ch, true)
	case err == nil && ch.Failed():
		// The confirmation was refused (a decline): no charge exists.
		activity.GetLogger(ctx).Warn("ambiguous stripe answer reconciled by lookup: declined", "order_id", in.OrderID, "payment_intent_id", ch.PaymentIntentID)
		return a.recordRefusal(ctx, in, key, token, store.PaymentFailure{
			Code: ch.FailureCode, DeclineCode: ch.DeclineCode, PaymentIntentID: ch.PaymentIntentID,
			Message: "declined (established by lookup after an ambiguous answer)",
		})
	case err != nil && !errors.Is(err, payment.ErrNotFound):
		return ChargeResult{}, fmt.Errorf("look up payment of order %d after ambiguous answer: %w", in.OrderID, err)
	}
	if token < a.ambiguousAttempts() {
		return ChargeResult{}, fmt.Errorf("charge order %d: ambiguous answer and no charge found yet (claim %d): %w", in.OrderID, token, cause)
	}
	if err := a.Store.RecordPaymentUnknown(ctx, in.Consumer, in.MessageID, key, token, cause.Error()); err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("record unknown payment of order %d: %w", in.OrderID, err))
	}
	activity.GetLogger(ctx).Error("payment outcome unknown: operator action needed", "order_id", in.OrderID, "message_id", in.MessageID)
	return ChargeResult{}, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("payment of order %d: outcome unknown after %d attempts", in.OrderID, token), ErrTypePaymentUnknown, cause)
}
