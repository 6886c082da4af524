package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// ErrRunMayCreate is returned by ResolveRefund when Stripe holds no refund
// for the message but a run of its workflow may still create one: nothing
// is recorded until no run is open.
var ErrRunMayCreate = errors.New("reconcile: no refund exists yet, and a run of the workflow may still create one")

// ErrStillOpen is wrapped when what the provider says leaves the effect
// open: a refund that differs from the request, a mail SendGrid has
// reported no event for.
var ErrStillOpen = errors.New("still open")

// RefundResult is what ResolveRefund found and did.
type RefundResult struct {
	Before store.Refund    `json:"before"`
	After  store.Refund    `json:"after"`
	Stripe *payment.Refund `json:"stripe,omitempty"`
	// Lookup is "list" (the PaymentIntent's refunds) or "retrieve" (a
	// pending or succeeded refund) when Stripe was asked.
	Lookup  string `json:"lookup,omitempty"`
	Changed bool   `json:"changed"`
}

// ResolveRefund settles a claimed or pending refund of message (consumer, messageID)
// from Stripe: the refunds of its PaymentIntent are listed (strongly
// consistent) and the one whose metadata names the message is checked
// against the request (amount, currency) and recorded, succeeded or
// failed. None means none was created; that is recorded (failed,
// not_created, its amount free again) only when noRunOpen says no run of
// the workflow can still create it, else ErrRunMayCreate. A pending or
// succeeded refund is retrieved and its status recorded (resolveCreated):
// Stripe may fail a refund after it succeeded, and a charge.refund.updated
// that never reached a worker is caught up so. A failed refund is final and
// is returned as it is, without a call.
func (r *Resolver) ResolveRefund(ctx context.Context, consumer, messageID string, noRunOpen bool) (RefundResult, error) {
	rf, err := r.Store.RefundOf(ctx, consumer, messageID)
	if err != nil {
		return RefundResult{}, err
	}
	res := RefundResult{Before: rf, After: rf}
	if rf.RefundID != "" && (rf.State == store.RefundPending || rf.State == store.RefundSucceeded) {
		return r.resolveCreated(ctx, res)
	}
	if rf.State != store.RefundClaimed {
		return res, nil
	}
	res.Lookup = "list"
	found, err := r.Payments.FindRefund(ctx, rf.PaymentIntentID, messageID)
	st := store.RefundSettlement{Refund: rf}
	switch {
	case errors.Is(err, payment.ErrNotFound) && !noRunOpen:
		return res, fmt.Errorf("refund of %s: %w", messageID, ErrRunMayCreate)
	case errors.Is(err, payment.ErrNotFound):
		st.State, st.Code = store.RefundFailed, "not_created"
		st.Message = "no refund exists at Stripe for this message (settled by starter resolve)"
	case err != nil:
		return res, fmt.Errorf("read refunds of %s: %w: %w", rf.PaymentIntentID, ErrStripe, err)
	default:
		res.Stripe = found
		if found.Amount != rf.Amount || !strings.EqualFold(found.Currency, rf.Currency) {
			return res, fmt.Errorf("refund %s of %d %s differs from the request (%d %s): %w",
				found.ID, found.Amount, found.Currency, rf.Amount, rf.Currency, ErrStillOpen)
		}
		st.RefundID, st.Status = found.ID, found.Status
		st.State = store.RefundSucceeded
		if found.Failed() {
			st.State, st.Code = store.RefundFailed, found.Status
			st.Message = "refund " + found.ID + " " + found.Status + " (settled from stripe)"
		}
	}
	if _, err := r.Store.SettleRefund(ctx, st); err != nil {
		return res, err
	}
	if res.After, err = r.Store.RefundOf(ctx, consumer, messageID); err != nil {
		return res, err
	}
	res.Changed = res.After.State != rf.State
	return res, nil
}

// resolveCreated retrieves a refund recorded pending or succeeded and
// records where Stripe has it now (store.UpdateRefund, as the webhook does:
// forward only, so a succeeded refund only moves to failed, its amount
// given back); still pending wraps ErrStillOpen.
func (r *Resolver) resolveCreated(ctx context.Context, res RefundResult) (RefundResult, error) {
	rf := res.Before
	res.Lookup = "retrieve"
	found, err := r.Payments.RetrieveRefund(ctx, rf.RefundID)
	if err != nil {
		return res, fmt.Errorf("retrieve refund %s: %w: %w", rf.RefundID, ErrStripe, err)
	}
	res.Stripe = found
	u, err := r.Store.UpdateRefund(ctx, store.RefundUpdate{
		RefundID: found.ID, Key: rf.Key, Status: found.Status, FailureReason: found.FailureReason, Source: "starter resolve",
	})
	if err != nil {
		return res, err
	}
	res.After, res.Changed = u.Refund, u.Changed
	if u.Refund.State == store.RefundPending {
		return res, fmt.Errorf("refund %s is %s at Stripe: %w", found.ID, found.Status, ErrStillOpen)
	}
	return res, nil
}

// ReceiptResult is what ResolveReceipt found and did.
type ReceiptResult struct {
	Key    string            `json:"key"`
	Before store.EffectState `json:"state_before"`
	After  store.EffectState `json:"state_after"`
	// XMessageID is SendGrid's X-Message-Id of the mail its events report.
	XMessageID string `json:"x_message_id,omitempty"`
	Changed    bool   `json:"changed"`
}

// ResolveReceipt settles a mail (an order's receipt, orderID; or a refund
// receipt, orderID 0) whose ledger row is claimed, in flight or unknown
// from SendGrid's events as the webhook recorded them: an event that
// proves SendGrid accepted the mail records it sent. No event wraps
// ErrStillOpen and changes nothing. Any other row is returned as it is.
func (r *Resolver) ResolveReceipt(ctx context.Context, e store.Effect, orderID int64) (ReceiptResult, error) {
	res := ReceiptResult{Key: e.Key, Before: e.State, After: e.State}
	switch e.State {
	case store.StateClaimed, store.StateInFlight, store.StateUnknown:
	default:
		return res, nil
	}
	x, ok, err := r.Store.EmailAccepted(ctx, e.Key)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("mail %s: SendGrid has reported no event for it: %w", e.Key, ErrStillOpen)
	}
	if _, err := r.Store.SettleReceipt(ctx, e.Key, orderID, x); err != nil {
		return res, err
	}
	res.After, res.XMessageID, res.Changed = store.StateSucceeded, x, true
	return res, nil
}
