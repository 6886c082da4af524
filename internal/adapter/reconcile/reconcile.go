// Package reconcile settles an open effect from its provider's own record
// of it: a payment or a refund from Stripe, a receipt from SendGrid's
// events (ResolveRefund, ResolveReceipt in effects.go).
//
// An open payment (claimed, processing, unknown, unexpected) is settled by a
// strongly consistent read of its PaymentIntent: a retrieve by the ID
// recorded in Postgres, or, when no ID is recorded (a claimed payment: the
// payment activity records the ID with the confirmation's outcome, so a
// claimed row may hide a PaymentIntent, even a confirmed one), a lookup over
// the claim's time window matched on metadata[message_id]
// (payment.Client.FindInWindow: a list of what is younger than Stripe's
// documented Search lag, Search only for what is older). The workflow's wait for a
// processing payment and `starter resolve` both settle through Resolve, and
// a final payment (succeeded, failed) is never moved.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// ClockSkew widens a list window on both sides: Stripe's clock and ours
// differ, and a PaymentIntent's created time is Stripe's.
const ClockSkew = 5 * time.Minute

// Resolver reads Stripe and settles the ledger.
type Resolver struct {
	Store    *store.Store
	Payments *payment.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Result is what Resolve found and did.
type Result struct {
	// Before and After are the payments row before and after Resolve.
	Before store.Payment `json:"before"`
	After  store.Payment `json:"after"`
	// Stripe is the PaymentIntent read, nil when none was read (the
	// payment was final already, or none exists).
	Stripe *payment.Charge `json:"stripe,omitempty"`
	// Lookup says how the PaymentIntent was found: "retrieve" (by the
	// recorded ID), "list" (over the claim's window), or "" when Stripe was
	// not asked.
	Lookup string `json:"lookup,omitempty"`
	// Changed reports that the payment's state changed.
	Changed bool `json:"changed"`
}

// ErrNoPaymentIntent is returned by Resolve when no ID is recorded and no
// PaymentIntent for the message exists in the claim's window: nothing was
// confirmed, so nothing was charged.
var ErrNoPaymentIntent = errors.New("reconcile: no payment intent exists for the message")

// ErrStripe is wrapped by the errors Resolve returns when Stripe could not
// be read; nothing was changed.
var ErrStripe = errors.New("stripe could not be read")

func (r *Resolver) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// Resolve reads the PaymentIntent of message (consumer, messageID) from
// Stripe and records what it says: succeeded → paid, a failed status →
// failed with Stripe's code, processing → processing, anything else →
// unexpected. A PaymentIntent whose amount, currency or payment method
// differs from the request's is recorded unexpected, whatever its status, with a reason
// naming the field. A payment already final is returned as it is, without a
// call. Errors from Stripe are returned as they are (the ledger is
// untouched), so an unreachable Stripe never settles anything.
func (r *Resolver) Resolve(ctx context.Context, consumer, messageID string) (Result, error) {
	p, err := r.Store.PaymentOf(ctx, consumer, messageID)
	if err != nil {
		return Result{}, err
	}
	res := Result{Before: p, After: p}
	if p.State == store.PaymentSucceeded || p.State == store.PaymentFailed {
		return res, nil
	}
	var ch *payment.Charge
	if p.PaymentIntentID != "" {
		res.Lookup = "retrieve"
		ch, err = r.Payments.Get(ctx, p.PaymentIntentID)
	} else {
		res.Lookup = "list"
		ch, err = r.Payments.FindInWindow(ctx, messageID, p.CreatedAt.Add(-ClockSkew), r.now().Add(ClockSkew))
		if errors.Is(err, payment.ErrNotFound) {
			return res, fmt.Errorf("payment of %s: %w", messageID, ErrNoPaymentIntent)
		}
	}
	if err != nil {
		return res, fmt.Errorf("read payment intent of %s: %w: %w", messageID, ErrStripe, err)
	}
	res.Stripe = ch
	st := store.Settlement{
		Payment: p, PaymentIntentID: ch.PaymentIntentID, ChargeID: ch.ChargeID, StripeStatus: ch.Status,
	}
	verdict, code, decline := ch.Verdict()
	// The ledger keeps no payment method: the request's is read from the
	// message's inbox row while it is kept ("" after pruning, which
	// compares amount and currency only).
	method, err := r.Store.RequestedPaymentMethod(ctx, consumer, messageID)
	if err != nil {
		return res, err
	}
	if d := ch.Differs(p.Amount, p.Currency, method); d != "" {
		// Not this payment's PaymentIntent, whatever its status: an
		// operator must look.
		verdict = payment.VerdictUnexpected
		st.Message = "payment intent " + ch.PaymentIntentID + " differs from the payment: " + d
	}
	switch verdict {
	case payment.VerdictPaid:
		st.State = store.PaymentSucceeded
	case payment.VerdictFailed:
		st.State, st.FailureCode, st.DeclineCode = store.PaymentFailed, code, decline
		st.Message = "payment intent " + ch.Status + " (settled from stripe)"
	case payment.VerdictProcessing:
		st.State = store.PaymentProcessing
	case payment.VerdictUnconfirmed:
		if p.State == store.PaymentClaimed {
			// An attempt holds the claim and will confirm it.
			return res, nil
		}
		st.State, st.Message = store.PaymentUnexpected, "payment intent was never confirmed"
	default:
		st.State = store.PaymentUnexpected
		if st.Message == "" {
			st.Message = "payment intent is " + ch.Status
		}
	}
	if st.State == p.State && st.PaymentIntentID == p.PaymentIntentID {
		return res, nil
	}
	if _, err := r.Store.SettlePayment(ctx, st); err != nil {
		return res, err
	}
	after, err := r.Store.PaymentOf(ctx, consumer, messageID)
	if err != nil {
		return res, err
	}
	res.After, res.Changed = after, after.State != p.State
	return res, nil
}
