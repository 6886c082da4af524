package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/reconcile"
	"github.com/effectively/effectively/internal/adapter/store"
)

// SettleInput names the payment SettlePayment reads.
type SettleInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
}

// SettlePaymentName is SettlePayment's activity type name.
const SettlePaymentName = "SettlePayment"

func init() { register(SettlePaymentName, func(a *Activities) any { return a.SettlePayment }) }

// SettlePayment reads a processing payment's PaymentIntent from Stripe by
// its recorded ID (strongly consistent) and records what it says, then
// returns the payment's outcome: PaymentPaid, PaymentFailed, or
// PaymentProcessing while Stripe is still processing it. A payment settled
// meanwhile (by a webhook, or an operator) is returned as recorded, without
// a call. Safe to retry and to run alongside those: the ledger moves by
// compare-and-set from open states only, and never out of a final one.
func (a *Activities) SettlePayment(ctx context.Context, in SettleInput) (ChargeResult, error) {
	r := reconcile.Resolver{Store: a.Store, Payments: a.Payments, Now: a.Now}
	res, err := r.Resolve(ctx, in.Consumer, in.MessageID)
	if err != nil {
		return ChargeResult{}, fmt.Errorf("settle payment of order %d: %w", in.OrderID, err)
	}
	p := res.After
	out := ChargeResult{PaymentIntentID: p.PaymentIntentID, Reconciled: res.Changed, Recorded: !res.Changed}
	switch p.State {
	case store.PaymentSucceeded:
		out.Outcome = PaymentPaid
	case store.PaymentFailed:
		out.Outcome, out.FailureCode, out.DeclineCode = PaymentFailed, p.FailureCode, p.DeclineCode
	case store.PaymentProcessing:
		out.Outcome = PaymentProcessing
	case store.PaymentUnexpected:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is unexpected (stripe status %s): operator action needed", in.OrderID, p.StripeStatus), ErrTypeUnexpectedState, nil)
	default:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is %s: operator action needed", in.OrderID, p.State), ErrTypePaymentUnknown, nil)
	}
	return out, nil
}
