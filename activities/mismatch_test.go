package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
)

// A PaymentIntent found by a lookup (retrieve by the recorded ID, list over
// the claim's window) is the request's payment only if its amount, currency
// and payment method match the request. One that differs is recorded
// unexpected for an operator: never paid, never failed, never confirmed,
// no receipt.

// claimAged claims in's payment as an earlier attempt did and ages the claim
// past the key window, so the next attempt looks the payment up first.
func claimAged(t *testing.T, f *fixture, in activities.ChargeInput) int32 {
	t.Helper()
	ctx := context.Background()
	c, err := f.db.ClaimPayment(ctx, store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		Key: "payment:" + in.MessageID, RequestHash: activities.RequestHash(in),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool().Exec(ctx, `UPDATE payments SET created_at = now() - interval '25 hours' WHERE message_id = $1`, in.MessageID); err != nil {
		t.Fatal(err)
	}
	return c.Claim
}

// decoy creates, directly at the simulator, a PaymentIntent carrying the
// message's metadata[message_id] with another amount; confirmed, it is
// charged (and succeeded).
func decoy(t *testing.T, f *fixture, in activities.ChargeInput, amount int64, confirmed bool) *payment.Charge {
	t.Helper()
	req := payment.ChargeRequest{
		IdempotencyKey: "decoy:" + in.MessageID, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: amount, Currency: in.Currency, PaymentMethod: in.PaymentMethod,
	}
	var (
		pi  *payment.Charge
		err error
	)
	if confirmed {
		pi, err = f.acts.Payments.Charge(context.Background(), req)
	} else {
		pi, err = f.acts.Payments.Create(context.Background(), req)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// wantUnexpected checks the non-retryable unexpected_state error and the
// ledger: unexpected, the reason naming the amount, no processed outcome;
// and that a retry reads the record without calling Stripe.
func wantUnexpected(t *testing.T, f *fixture, in activities.ChargeInput, err error) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !isType(err, activities.ErrTypeUnexpectedState) || !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("err = %v; want a non-retryable %s", err, activities.ErrTypeUnexpectedState)
	}
	p := paymentOf(t, f, in.MessageID)
	if p.State != store.PaymentUnexpected || !strings.Contains(p.FailureMessage, "amount 2999, want 1999") {
		t.Fatalf("payment = %+v; want unexpected, naming the amount", p)
	}
	if o := processedOutcome(t, f, in.MessageID); o != "" {
		t.Fatalf("processed outcome = %q; want none (no receipt)", o)
	}
	before := f.sims.Stripe.Stats().Requests
	if _, err := run(t, f, f.acts.ChargeOrder, in); !isType(err, activities.ErrTypeUnexpectedState) {
		t.Fatalf("retry err = %v", err)
	}
	if after := f.sims.Stripe.Stats().Requests; after != before {
		t.Fatalf("a retry called Stripe %d times", after-before)
	}
}

func TestChargeOrderListedPaymentIntentOfAnotherAmountIsUnexpected(t *testing.T) {
	for _, confirmed := range []bool{true, false} {
		name := "unconfirmed"
		if confirmed {
			name = "succeeded"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "")
			in := charge("evt_mm_list_"+name, 60, "pm_card_visa")
			claimAged(t, f, in)
			d := decoy(t, f, in, 2999, confirmed)
			charges := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]
			_, err := run(t, f, f.acts.ChargeOrder, in)
			wantUnexpected(t, f, in, err)
			if p := paymentOf(t, f, in.MessageID); p.PaymentIntentID != d.PaymentIntentID {
				t.Fatalf("payment intent = %q; want the one found, %q", p.PaymentIntentID, d.PaymentIntentID)
			}
			st := f.sims.Stripe.Stats()
			if st.ChargesByMessage[in.MessageID] != charges || st.RequestsByOperation["create"] != 1 {
				t.Fatalf("charges %d → %d, creates %d: the activity charged or created", charges, st.ChargesByMessage[in.MessageID], st.RequestsByOperation["create"])
			}
		})
	}
}

func TestChargeOrderRetrievedPaymentIntentOfAnotherAmountIsUnexpected(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_mm_get", 61, "pm_card_visa")
	token := claimAged(t, f, in)
	d := decoy(t, f, in, 2999, false)
	if err := f.db.RecordPaymentIntentID(context.Background(), in.Consumer, in.MessageID, "payment:"+in.MessageID, token, d.PaymentIntentID); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, f, f.acts.ChargeOrder, in)
	wantUnexpected(t, f, in, err)
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 0 {
		t.Fatalf("charges = %d; the payment intent of another amount was confirmed", n)
	}
}

func TestChargeOrderAmbiguousCreateListingAnotherAmountIsUnexpected(t *testing.T) {
	for _, confirmed := range []bool{true, false} {
		name := "unconfirmed"
		if confirmed {
			name = "succeeded"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "")
			in := charge("evt_mm_amb_"+name, 62, "pm_card_visa")
			f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{IdempotencyKey: "paymentintent:" + in.MessageID}, Kind: stripesim.FaultErrorAfter, Times: 1})
			if _, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
				t.Fatal("a fresh 500 was not reported")
			}
			// A PaymentIntent of another amount carries the message's
			// metadata: the list prefers it to the unconfirmed one the
			// create made (succeeded, or unconfirmed and newer).
			time.Sleep(1100 * time.Millisecond)
			decoy(t, f, in, 2999, confirmed)
			charges := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]
			_, err := run(t, f, f.acts.ChargeOrder, in)
			wantUnexpected(t, f, in, err)
			if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != charges {
				t.Fatalf("charges %d → %d: the activity charged", charges, n)
			}
		})
	}
}

func TestSettlePaymentOfAnotherAmountIsUnexpected(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_mm_settle", 63, "pm_card_visa")
	claimAged(t, f, in)
	decoy(t, f, in, 2999, true)
	_, err := run(t, f, f.acts.SettlePayment, activities.SettleInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID})
	wantUnexpected(t, f, in, err)
}

func TestChargeOrderListedPaymentIntentOfAnotherPaymentMethodIsUnexpected(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_mm_pm", 64, "pm_card_visa")
	claimAged(t, f, in)
	other := in
	other.PaymentMethod = "pm_card_mastercard"
	decoy(t, f, other, in.Amount, false)
	_, err := run(t, f, f.acts.ChargeOrder, in)
	if !isType(err, activities.ErrTypeUnexpectedState) {
		t.Fatalf("err = %v; want %s", err, activities.ErrTypeUnexpectedState)
	}
	p := paymentOf(t, f, in.MessageID)
	if p.State != store.PaymentUnexpected || !strings.Contains(p.FailureMessage, "payment_method differs") || strings.Contains(p.FailureMessage, "pm_card") {
		t.Fatalf("payment = %+v; want unexpected, naming the payment method without its values", p)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 0 {
		t.Fatalf("charges = %d; the payment intent was confirmed", n)
	}
}

// TestChargeOrderRefusedConfirmRetrievingAnotherAmountIsUnexpected: the
// recorded PaymentIntent is settled already, so the confirm is refused and
// the PaymentIntent retrieved; it has another amount.
func TestChargeOrderRefusedConfirmRetrievingAnotherAmountIsUnexpected(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_mm_conf", 65, "pm_card_visa")
	c, err := f.db.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		Key: "payment:" + in.MessageID, RequestHash: activities.RequestHash(in),
	})
	if err != nil {
		t.Fatal(err)
	}
	d := decoy(t, f, in, 2999, true)
	if err := f.db.RecordPaymentIntentID(context.Background(), in.Consumer, in.MessageID, "payment:"+in.MessageID, c.Claim, d.PaymentIntentID); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, f, f.acts.ChargeOrder, in)
	wantUnexpected(t, f, in, err)
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 1 {
		t.Fatalf("charges = %d, want 1 (the other amount's only)", n)
	}
}
