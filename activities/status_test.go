package activities_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
)

// Only a succeeded PaymentIntent is a charge. Each status a confirmation can
// end in is asked of the simulator through its test payment method, and
// what is recorded in Postgres is checked.

func paymentOf(t *testing.T, f *fixture, id string) store.Payment {
	t.Helper()
	p, err := f.db.PaymentOf(context.Background(), "order-placed", id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func processedOutcome(t *testing.T, f *fixture, id string) store.Outcome {
	t.Helper()
	st, err := f.db.Status(context.Background(), "order-placed", id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processed == nil {
		return ""
	}
	return st.Processed.Outcome
}

func TestChargeStatusProcessingThenSettled(t *testing.T) {
	for _, tc := range []struct {
		pm      string
		succeed bool
		want    activities.PaymentOutcome
	}{
		{"pm_card_processing", true, activities.PaymentPaid},
		{"pm_card_processingDeclined", false, activities.PaymentFailed},
	} {
		t.Run(tc.pm, func(t *testing.T) {
			f := newFixture(t, "")
			id := "evt_proc_" + string(tc.want)
			in := charge(id, 50, tc.pm)
			r, err := run(t, f, f.acts.ChargeOrder, in)
			if err != nil || r.Outcome != activities.PaymentProcessing || r.PaymentIntentID == "" {
				t.Fatalf("charge = %+v, %v; want processing", r, err)
			}
			p := paymentOf(t, f, id)
			if p.State != store.PaymentProcessing || p.PaymentIntentID != r.PaymentIntentID || p.StripeStatus != "processing" {
				t.Fatalf("payment = %+v; want processing with its payment intent", p)
			}
			if o := processedOutcome(t, f, id); o != "" {
				t.Fatalf("a processing payment has processed outcome %q", o)
			}
			// A retry returns the recorded state without calling Stripe.
			if r2, err := run(t, f, f.acts.ChargeOrder, in); err != nil || r2.Outcome != activities.PaymentProcessing || !r2.Recorded {
				t.Fatalf("retry = %+v, %v", r2, err)
			}
			// Still processing at Stripe: settling changes nothing.
			settle := activities.SettleInput{Consumer: "order-placed", MessageID: id, OrderID: 50}
			if s, err := run(t, f, f.acts.SettlePayment, settle); err != nil || s.Outcome != activities.PaymentProcessing {
				t.Fatalf("settle while processing = %+v, %v", s, err)
			}
			if err := f.sims.Stripe.SettleProcessing(r.PaymentIntentID, tc.succeed); err != nil {
				t.Fatal(err)
			}
			s, err := run(t, f, f.acts.SettlePayment, settle)
			if err != nil || s.Outcome != tc.want {
				t.Fatalf("settle = %+v, %v; want %s", s, err, tc.want)
			}
			wantState, wantProcessed := store.PaymentSucceeded, store.OutcomePaid
			if !tc.succeed {
				wantState, wantProcessed = store.PaymentFailed, store.OutcomePaymentFailed
			}
			if p := paymentOf(t, f, id); p.State != wantState {
				t.Fatalf("payment after settle = %+v; want %s", p, wantState)
			}
			if o := processedOutcome(t, f, id); o != wantProcessed {
				t.Fatalf("processed outcome = %q, want %q", o, wantProcessed)
			}
			st := f.sims.Stripe.Stats()
			if n := st.ChargesByMessage[id]; (n == 1) != tc.succeed || n > 1 {
				t.Fatalf("charges = %d", n)
			}
			if st.RequestsByOperation["search"] != 0 {
				t.Fatalf("search was used: %v", st.RequestsByOperation)
			}
		})
	}
}

func TestChargeStatusRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, pm, status, code, decline string
	}{
		{"requires_payment_method", "pm_card_requiresPaymentMethod", "requires_payment_method", "card_declined", "generic_decline"},
		{"canceled", "pm_card_canceled", "canceled", "automatic", ""},
		// Off-session, Stripe fails the confirmation with a 402 (a
		// decline, whose status is not recorded) rather than ask for an
		// authentication no customer is there to give.
		{"authentication_required", "pm_card_authenticationRequired", "", payment.CodeAuthenticationRequired, payment.CodeAuthenticationRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			id := "evt_" + tc.name
			r, err := run(t, f, f.acts.ChargeOrder, charge(id, 51, tc.pm))
			if err != nil || r.Outcome != activities.PaymentFailed || r.FailureCode != tc.code || r.DeclineCode != tc.decline {
				t.Fatalf("charge = %+v, %v; want declined %s/%s", r, err, tc.code, tc.decline)
			}
			p := paymentOf(t, f, id)
			if p.State != store.PaymentFailed || p.FailureCode != tc.code || p.PaymentIntentID == "" || p.StripeStatus != tc.status {
				t.Fatalf("payment = %+v", p)
			}
			if o := processedOutcome(t, f, id); o != store.OutcomePaymentFailed {
				t.Fatalf("processed outcome = %q", o)
			}
			if n := f.sims.Stripe.Stats().Charges; n != 0 {
				t.Fatalf("charges = %d", n)
			}
		})
	}
}

func TestChargeStatusUnexpected(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_cap", 52, "pm_card_requiresCapture")
	_, err := run(t, f, f.acts.ChargeOrder, in)
	var appErr *temporal.ApplicationError
	if !isType(err, activities.ErrTypeUnexpectedState) || !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("err = %v; want a non-retryable %s", err, activities.ErrTypeUnexpectedState)
	}
	p := paymentOf(t, f, "evt_cap")
	if p.State != store.PaymentUnexpected || p.StripeStatus != "requires_capture" || p.PaymentIntentID == "" {
		t.Fatalf("payment = %+v; want unexpected", p)
	}
	if o := processedOutcome(t, f, "evt_cap"); o != "" {
		t.Fatalf("processed outcome = %q; want none", o)
	}
	before := f.sims.Stripe.Stats().Requests
	if _, err := run(t, f, f.acts.ChargeOrder, in); !isType(err, activities.ErrTypeUnexpectedState) {
		t.Fatalf("retry err = %v", err)
	}
	if after := f.sims.Stripe.Stats().Requests; after != before {
		t.Fatalf("a retry called Stripe %d times", after-before)
	}
}

// TestChargeLostResponseUnderSearchLag: the confirmation charges and its
// response is lost; the next attempt comes after Stripe forgot the keys.
// Search would not see the PaymentIntent for a minute (the simulator's
// default lag), and no ID was recorded (the ID is recorded with the
// outcome), but the attempt lists the claim's window, strongly consistent:
// recorded paid, no unknown, one charge, no search.
func TestChargeLostResponseUnderSearchLag(t *testing.T) {
	sim := stripesim.New(stripesim.Options{KeyTTL: time.Second}) // default search lag: 60 s
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	// No keep-alive: Go's transport would otherwise replay the lost request
	// itself and get Stripe's saved answer.
	pay, err := payment.New(payment.Config{
		APIKey: "sk_test_lost", BaseURL: srv.URL, MaxNetworkRetries: payment.NoNetworkRetries,
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	db := store.New(storetest.NewPool(t))
	f := &fixture{acts: &activities.Activities{Store: db, Payments: pay}, db: db}
	in := charge("evt_lost", 53, "pm_card_visa")
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{IdempotencyKey: "payment:evt_lost"}, Kind: stripesim.FaultLostAfter, Times: 1})

	if _, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
		t.Fatal("a lost response was reported as an outcome")
	}
	if n := sim.Stats().ChargesByMessage["evt_lost"]; n != 1 {
		t.Fatalf("charges after the lost response = %d, want 1", n)
	}
	if _, err := db.Pool().Exec(context.Background(), `UPDATE payments SET created_at = now() - interval '25 hours' WHERE message_id = 'evt_lost'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the keys expire at the simulator

	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || !r.Reconciled {
		t.Fatalf("next attempt = %+v, %v; want paid, reconciled", r, err)
	}
	if p, _ := db.PaymentOf(context.Background(), "order-placed", "evt_lost"); p.State != store.PaymentSucceeded {
		t.Fatalf("payment = %+v", p)
	}
	st := sim.Stats()
	if st.ChargesByMessage["evt_lost"] != 1 || st.RequestsByOperation["search"] != 0 || st.RequestsByOperation["confirm"] != 1 {
		t.Fatalf("charges = %d, requests = %v; want one charge, one confirm, no search", st.ChargesByMessage["evt_lost"], st.RequestsByOperation)
	}
}

// TestChargeStripeCallsPerMessage counts the Stripe requests of the common
// case, for the bench report: create + confirm.
func TestChargeStripeCallsPerMessage(t *testing.T) {
	f := newFixture(t, "")
	const n = 5
	for i := range n {
		id := "evt_calls_" + string(rune('a'+i))
		if r, err := run(t, f, f.acts.ChargeOrder, charge(id, int64(60+i), "pm_card_visa")); err != nil || r.Outcome != activities.PaymentPaid {
			t.Fatalf("%s = %+v, %v", id, r, err)
		}
	}
	st := f.sims.Stripe.Stats()
	t.Logf("stripe requests for %d messages: %d (%v)", n, st.Requests, st.RequestsByOperation)
	if st.Requests != 2*n || st.RequestsByOperation["create"] != n || st.RequestsByOperation["confirm"] != n {
		t.Fatalf("requests = %d %v; want create + confirm per message", st.Requests, st.RequestsByOperation)
	}
}

// TestChargeOrderFromTheSingleRequestScheme: a payment claimed by a worker
// from before create then confirm, which created and confirmed it in
// one request under "payment:<id>", and retried by this one: the confirm
// key meets its old use, and the list of the claim's window finds the
// charge. Recorded paid, one charge.
func TestChargeOrderFromTheSingleRequestScheme(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_old_scheme", 54, "pm_card_visa")
	if _, err := f.db.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		Key: "payment:evt_old_scheme", RequestHash: activities.RequestHash(in),
	}); err != nil {
		t.Fatal(err)
	}
	old, err := f.acts.Payments.Charge(context.Background(), payment.ChargeRequest{
		IdempotencyKey: "payment:evt_old_scheme", MessageID: "evt_old_scheme", OrderID: 54, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || r.PaymentIntentID != old.PaymentIntentID {
		t.Fatalf("retry under the new scheme = %+v, %v; want paid with %s", r, err, old.PaymentIntentID)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_old_scheme"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
	if p := paymentOf(t, f, "evt_old_scheme"); p.State != store.PaymentSucceeded || p.PaymentIntentID != old.PaymentIntentID {
		t.Fatalf("payment = %+v", p)
	}
}
