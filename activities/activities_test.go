package activities_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// fixture is the real Activities struct against real Postgres and the
// simulators behind the real clients.
type fixture struct {
	acts *activities.Activities
	sims *testenv.Sims
	db   *store.Store
}

func newFixture(t *testing.T, policy store.EmailPolicy) *fixture {
	t.Helper()
	sims := testenv.StartSims(t)
	db := store.New(storetest.NewPool(t))
	return &fixture{
		acts: &activities.Activities{Store: db, Payments: sims.PaymentClient(t), Mailer: sims.EmailClient(t), EmailPolicy: policy, AmbiguousAttempts: 2},
		sims: sims, db: db,
	}
}

// run executes one activity call: each call is a new attempt (a new claim).
func run[In, Out any](t *testing.T, f *fixture, fn func(context.Context, In) (Out, error), in In) (Out, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(f.acts)
	env.SetTestTimeout(30 * time.Second)
	var out Out
	val, err := env.ExecuteActivity(fn, in)
	if err != nil {
		return out, err
	}
	if err := val.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

func charge(id string, order int64, pm string) activities.ChargeInput {
	return activities.ChargeInput{Consumer: "order-placed", MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", PaymentMethod: pm}
}

// wantRetryConfirmsOnly runs ChargeOrder again for in, whose earlier
// attempt recorded the PaymentIntent pi and did not send its confirm: the
// retry pays with pi by one request (the confirm), creates nothing again
// and replays nothing.
func wantRetryConfirmsOnly(t *testing.T, f *fixture, in activities.ChargeInput, pi string) {
	t.Helper()
	before := f.sims.Stripe.Stats().Requests
	if r, err := run(t, f, f.acts.ChargeOrder, in); err != nil || r.Outcome != activities.PaymentPaid || r.PaymentIntentID != pi {
		t.Fatalf("retry = %+v, %v; want paid with %s", r, err, pi)
	}
	st := f.sims.Stripe.Stats()
	if st.ChargesByMessage[in.MessageID] != 1 || st.Replays != 0 || st.Requests-before != 1 {
		t.Fatalf("charges %v, replays %d, requests of the retry %d; want one charge by one confirm, no create again",
			st.ChargesByMessage, st.Replays, st.Requests-before)
	}
}

func isType(err error, typ string) bool {
	var appErr *temporal.ApplicationError
	for errors.As(err, &appErr) {
		if appErr.Type() == typ {
			return true
		}
		err = appErr.Unwrap()
		appErr = nil
	}
	return false
}

func TestChargeOrderIsSafeToRetry(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_1", 42, "pm_card_visa")
	r1, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r1.Outcome != activities.PaymentPaid || r1.PaymentIntentID == "" {
		t.Fatalf("first = %+v, %v", r1, err)
	}
	r2, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r2.Outcome != activities.PaymentPaid || r2.PaymentIntentID != r1.PaymentIntentID || !r2.Recorded {
		t.Fatalf("retry = %+v, %v", r2, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_1"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestChargeOrderRecordFailedThenRetryReplays(t *testing.T) {
	// An attempt claimed, created and confirmed the PaymentIntent, then died
	// before recording its ID: the retry's create and confirm are replayed
	// under their keys, and the charge is recorded. One charge.
	f := newFixture(t, "")
	in := charge("evt_2", 7, "pm_card_visa")
	if _, err := f.db.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		Key: "payment:evt_2", RequestHash: activities.RequestHash(in),
	}); err != nil {
		t.Fatal(err)
	}
	pi, err := f.acts.Payments.Create(context.Background(), payment.ChargeRequest{
		IdempotencyKey: "paymentintent:evt_2", MessageID: "evt_2", OrderID: 7, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.acts.Payments.Confirm(context.Background(), pi.PaymentIntentID, "payment:evt_2"); err != nil {
		t.Fatal(err)
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || r.PaymentIntentID != pi.PaymentIntentID || !r.Replayed {
		t.Fatalf("charge after an unrecorded call = %+v, %v", r, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_2"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestChargeOrderDeclinedIsRecordedNotRetried(t *testing.T) {
	f := newFixture(t, "")
	r, err := run(t, f, f.acts.ChargeOrder, charge("evt_d", 8, "pm_card_chargeDeclinedInsufficientFunds"))
	if err != nil || r.Outcome != activities.PaymentFailed || r.DeclineCode != "insufficient_funds" {
		t.Fatalf("declined = %+v, %v", r, err)
	}
	st, err := f.db.Status(context.Background(), "order-placed", "evt_d")
	if err != nil || st.Order.Status != store.OrderPaymentFailed || st.Processed.Outcome != store.OutcomePaymentFailed {
		t.Fatalf("status = %+v, %v", st, err)
	}
}

func TestChargeOrderTransientErrorIsRetryable(t *testing.T) {
	f := newFixture(t, "")
	f.sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultRateLimit, Times: 5})
	_, err := run(t, f, f.acts.ChargeOrder, charge("evt_rl", 9, "pm_card_visa"))
	var appErr *temporal.ApplicationError
	if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
		t.Fatalf("429: err = %v, want a retryable error", err)
	}
	if n := f.sims.Stripe.Stats().Charges; n != 0 {
		t.Fatalf("charges = %d", n)
	}
	f.sims.Stripe.ClearFaults()
	r, err := run(t, f, f.acts.ChargeOrder, charge("evt_rl", 9, "pm_card_visa"))
	if err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("after the fault = %+v, %v", r, err)
	}
}

func TestChargeOrderBusinessDuplicate(t *testing.T) {
	f := newFixture(t, "")
	if _, err := run(t, f, f.acts.ChargeOrder, charge("evt_a", 42, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	r, err := run(t, f, f.acts.ChargeOrder, charge("evt_b", 42, "pm_card_visa"))
	if err != nil || r.Outcome != activities.PaymentBusinessDuplicate || r.HeldBy != "evt_a" {
		t.Fatalf("second message = %+v, %v", r, err)
	}
	if n := f.sims.Stripe.Stats().Charges; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestChargeOrderAmbiguousCreateIsReconciled(t *testing.T) {
	f := newFixture(t, "")
	// Stripe creates the PaymentIntent, then answers a 500 that it saves
	// under the create key: every retry with the key gets the same 500.
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{IdempotencyKey: "paymentintent:evt_amb"}, Kind: stripesim.FaultErrorAfter, Times: 1})
	in := charge("evt_amb", 11, "pm_card_visa")
	if _, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
		t.Fatal("a fresh 500 was not reported")
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("after the 500 = %+v, %v; want paid", r, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_amb"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestChargeOrderAmbiguousConfirmIsRetrieved(t *testing.T) {
	f := newFixture(t, "")
	// The confirmation charges, then Stripe answers a 500 saved under the
	// confirm key: the retry's confirm replays it, and the recorded
	// PaymentIntent is retrieved by ID instead.
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{IdempotencyKey: "payment:evt_ambc"}, Kind: stripesim.FaultErrorAfter, Times: 1})
	in := charge("evt_ambc", 14, "pm_card_visa")
	if _, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
		t.Fatal("a fresh 500 was not reported")
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || !r.Reconciled {
		t.Fatalf("replayed 500 = %+v, %v; want reconciled by retrieve", r, err)
	}
	st := f.sims.Stripe.Stats()
	if st.ChargesByMessage["evt_ambc"] != 1 || st.RequestsByOperation["search"] != 0 || st.RequestsByOperation["retrieve"] != 1 {
		t.Fatalf("charges = %d, requests = %v; want 1 charge, one retrieve, no search", st.ChargesByMessage["evt_ambc"], st.RequestsByOperation)
	}
}

// TestChargeOrderSupersededClaimIsFenced: while an attempt waits for
// Stripe, a later attempt claims the row (as the regular activity does after
// a local one timed out). The first attempt's record is refused with a
// retryable Fenced error, and the next attempt records the replayed charge:
// one charge, recorded once.
func TestChargeOrderSupersededClaimIsFenced(t *testing.T) {
	f := newFixture(t, "")
	in := charge("evt_z", 12, "pm_card_visa")
	var stolen atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/confirm") && stolen.CompareAndSwap(false, true) {
			c, err := f.db.ClaimPayment(r.Context(), store.PaymentClaim{
				Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
				Key: "payment:evt_z", RequestHash: activities.RequestHash(in),
			})
			if err != nil || c.Outcome != store.ClaimOwned || c.Claim != 2 {
				t.Errorf("competing claim = %+v, %v; want owned under claim 2", c, err)
			}
		}
		f.sims.Stripe.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pay, err := payment.New(payment.Config{APIKey: "sk_test_fence", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f.acts.Payments = pay

	_, err = run(t, f, f.acts.ChargeOrder, in)
	var appErr *temporal.ApplicationError
	if !isType(err, activities.ErrTypeFenced) || !errors.As(err, &appErr) || appErr.NonRetryable() {
		t.Fatalf("superseded attempt err = %v, want a retryable %s", err, activities.ErrTypeFenced)
	}
	if p, err := f.db.PaymentOf(context.Background(), "order-placed", "evt_z"); err != nil || p.State != store.PaymentClaimed {
		t.Fatalf("payment after the fenced record = %+v, %v; want still claimed", p, err)
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || !r.Replayed {
		t.Fatalf("next attempt = %+v, %v; want paid from Stripe's replay", r, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_z"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestSendReceiptLedger(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	if _, err := run(t, f, f.acts.ChargeOrder, charge("evt_r", 20, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	in := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_r", OrderID: 20, Amount: 1999, Currency: "usd", To: "ada@example.com", PaymentIntentID: "pi_x"}
	r1, err := run(t, f, f.acts.SendReceipt, in)
	if err != nil || r1.Outcome != activities.ReceiptSent || r1.ProviderMessageID == "" {
		t.Fatalf("first = %+v, %v", r1, err)
	}
	r2, err := run(t, f, f.acts.SendReceipt, in)
	if err != nil || !r2.Recorded || r2.ProviderMessageID != r1.ProviderMessageID {
		t.Fatalf("retry = %+v, %v", r2, err)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_r"]; n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}

// TestSendReceiptLostResponsePolicies: SendGrid accepts a receipt and the
// answer is lost, the send being SendReceipt's or the charge's (under the
// claim its record took: the charge still returns paid, with no receipt).
// The retry's claim supersedes the lost send's (claim 2 at-least-once, the
// row settled unknown at-most-once) and acts on the policy.
func TestSendReceiptLostResponsePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy         store.EmailPolicy
		wantDeliveries int
		wantOutcome    activities.ReceiptOutcome
	}{
		// Send-then-record: the retry sends again (the documented duplicate).
		{store.AtLeastOnce, 2, activities.ReceiptSent},
		// Record-then-send: the retry refuses to resend.
		{store.AtMostOnce, 1, activities.ReceiptUnknown},
	} {
		for _, byCharge := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sent_by_charge=%v", tc.policy, byCharge), func(t *testing.T) {
				f := newFixture(t, tc.policy)
				ch := charge("evt_l", 21, "pm_card_visa")
				in := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_l", OrderID: 21, Amount: 1999, Currency: "usd", To: "ada@example.com"}
				if byCharge {
					ch = withReceipt(ch)
					f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultLostAfter, Times: 1})
				}
				c := chargeLocally(t, f, ch)
				if c.Outcome != activities.PaymentPaid || c.Receipt != nil {
					t.Fatalf("charge = %+v; want paid, no receipt recorded", c)
				}
				if byCharge {
					in.PaymentIntentID = c.PaymentIntentID
				} else {
					f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultLostAfter, Times: 1})
					if _, err := run(t, f, f.acts.SendReceipt, in); err == nil {
						t.Fatal("a lost response was reported as sent")
					}
				}
				r, err := run(t, f, f.acts.SendReceipt, in)
				if err != nil || r.Outcome != tc.wantOutcome {
					t.Fatalf("retry = %+v, %v", r, err)
				}
				if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_l"]; n != tc.wantDeliveries {
					t.Fatalf("deliveries = %d, want %d", n, tc.wantDeliveries)
				}
				e, err := f.db.Effect(context.Background(), "email:evt_l")
				if err != nil || (tc.policy == store.AtLeastOnce && e.Claim != 2) || (tc.policy == store.AtMostOnce && e.State != store.StateUnknown) {
					t.Errorf("receipt's ledger row = %+v, %v; want the lost send's claim 1 superseded", e, err)
				}
			})
		}
	}
}

func TestSendReceiptPermanentFailureIsRecorded(t *testing.T) {
	f := newFixture(t, "")
	if _, err := run(t, f, f.acts.ChargeOrder, charge("evt_p", 22, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 400, Times: 1})
	in := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_p", OrderID: 22, Amount: 1999, Currency: "usd", To: "ada@example.com"}
	r, err := run(t, f, f.acts.SendReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptFailed {
		t.Fatalf("400 = %+v, %v", r, err)
	}
	st, _ := f.db.Status(context.Background(), "order-placed", "evt_p")
	if st.Order.ReceiptStatus != "failed" {
		t.Fatalf("receipt status = %s", st.Order.ReceiptStatus)
	}
}

func TestChargeOrderPastTheKeyWindowLooksUpFirst(t *testing.T) {
	// A simulator that forgets keys after a second: a repeat after that would
	// be a second charge unless the activity looks the payment up first.
	sim := stripesim.New(stripesim.Options{KeyTTL: time.Second})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	pay, err := payment.New(payment.Config{APIKey: "sk_test_window", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	db := store.New(storetest.NewPool(t))
	f := &fixture{acts: &activities.Activities{Store: db, Payments: pay}, db: db}
	in := charge("evt_old", 30, "pm_card_visa")

	// Attempt 1 charged and died before recording; its claim is a day old.
	if _, err := db.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		Key: "payment:evt_old", RequestHash: activities.RequestHash(in),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pay.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: "payment:evt_old", MessageID: "evt_old", OrderID: 30, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(context.Background(), `UPDATE payments SET created_at = now() - interval '25 hours' WHERE message_id = 'evt_old'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the key expires at the simulator

	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid || !r.Reconciled {
		t.Fatalf("charge past the key window = %+v, %v; want reconciled", r, err)
	}
	if n := sim.Stats().ChargesByMessage["evt_old"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestChargeOrderAmbiguousDeclineIsReconciled(t *testing.T) {
	f := newFixture(t, "")
	// The card is declined, but Stripe answers a 500 and saves it.
	f.sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultErrorAfter, Times: 1})
	in := charge("evt_ambd", 13, "pm_card_chargeDeclined")
	if _, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
		t.Fatal("a fresh 500 was not reported")
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentFailed || r.DeclineCode != "generic_decline" {
		t.Fatalf("replayed 500 on a declined card = %+v, %v; want declined by lookup", r, err)
	}
	st, err := f.db.Status(context.Background(), "order-placed", "evt_ambd")
	if err != nil || st.Processed == nil || st.Processed.Outcome != store.OutcomePaymentFailed {
		t.Fatalf("status = %+v, %v", st.Processed, err)
	}
}

// TestChargeOrderAmbiguousCreateWithNothingListedFails puts Stripe in the
// worst case for a create: every create answers a replayed 500 (the key's
// saved answer) and the list, strongly consistent, shows no PaymentIntent.
// The activity never creates again on a guess and never confirms anything:
// after a few claims it records the payment failed (create_failed), since
// nothing exists at Stripe that could have been charged.
func TestChargeOrderAmbiguousCreateWithNothingListedFails(t *testing.T) {
	var creates, confirms atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
			creates.Add(1)
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"An unknown error occurred"}}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
			_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false,"url":"/v1/payment_intents"}`))
		case strings.HasSuffix(r.URL.Path, "/confirm"):
			confirms.Add(1)
			http.NotFound(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	f := stubStripeFixture(t, srv)
	db := f.db
	in := charge("evt_unk", 40, "pm_card_visa")
	for attempt := int32(1); attempt < 3; attempt++ {
		_, err := run(t, f, f.acts.ChargeOrder, in)
		var appErr *temporal.ApplicationError
		if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
			t.Fatalf("attempt %d: err = %v, want a retryable error", attempt, err)
		}
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentFailed || r.FailureCode != activities.CodeCreateFailed {
		t.Fatalf("attempt 3 = %+v, %v; want %s", r, err, activities.CodeCreateFailed)
	}
	p, err := db.PaymentOf(context.Background(), "order-placed", "evt_unk")
	if err != nil || p.State != store.PaymentFailed {
		t.Fatalf("payment = %+v, %v; want failed", p, err)
	}
	// A later attempt does not call Stripe again: the outcome is recorded.
	before := creates.Load()
	if r, err := run(t, f, f.acts.ChargeOrder, in); err != nil || !r.Recorded {
		t.Fatalf("attempt 4 = %+v, %v", r, err)
	}
	if creates.Load() != before || confirms.Load() != 0 {
		t.Fatalf("creates %d → %d, confirms %d: Stripe was asked again", before, creates.Load(), confirms.Load())
	}
}

// stubStripeFixture is a fixture whose Stripe is srv (closed with the
// test), with no network retries and AmbiguousAttempts 3.
func stubStripeFixture(t *testing.T, srv *httptest.Server) *fixture {
	t.Helper()
	t.Cleanup(srv.Close)
	pay, err := payment.New(payment.Config{APIKey: "sk_test_unknown", BaseURL: srv.URL, MaxNetworkRetries: payment.NoNetworkRetries})
	if err != nil {
		t.Fatal(err)
	}
	db := store.New(storetest.NewPool(t))
	return &fixture{acts: &activities.Activities{Store: db, Payments: pay, AmbiguousAttempts: 3}, db: db}
}

// TestChargeOrderAmbiguousCreateCountsOnlyListsThatRan: the evidence that
// an ambiguous create made nothing is lists that found nothing, not
// claims: an attempt whose list failed (or that the rate limit sent back
// before it listed) adds none. With AmbiguousAttempts 3 and every other
// list failing, the payment is recorded failed at the fifth attempt, the
// third empty list; counting claims would have decided at the third.
func TestChargeOrderAmbiguousCreateCountsOnlyListsThatRan(t *testing.T) {
	var lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"An unknown error occurred"}}`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
			if lists.Add(1)%2 == 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"try again"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false,"url":"/v1/payment_intents"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	f := stubStripeFixture(t, srv)
	in := charge("evt_unk_lists", 41, "pm_card_visa")
	for attempt := 1; attempt < 5; attempt++ {
		if r, err := run(t, f, f.acts.ChargeOrder, in); err == nil {
			t.Fatalf("attempt %d = %+v: decided after %d lists, %d of them empty", attempt, r, lists.Load(), (lists.Load()+1)/2)
		}
	}
	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentFailed || r.FailureCode != activities.CodeCreateFailed {
		t.Fatalf("attempt 5 = %+v, %v; want %s after the third empty list", r, err, activities.CodeCreateFailed)
	}
}
