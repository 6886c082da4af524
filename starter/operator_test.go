package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// opsFixture is a fresh database and the simulators, with the starter's
// environment pointed at them. Temporal is unreachable unless a test sets
// TEMPORAL_ADDRESS itself.
type opsFixture struct {
	db   *store.Store
	sims *testenv.Sims
	acts *activities.Activities
}

func newOpsFixture(t *testing.T) *opsFixture {
	t.Helper()
	url := storetest.NewDatabase(t)
	pool, err := store.Open(context.Background(), url, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sims := testenv.StartSims(t)
	f := &opsFixture{db: store.New(pool), sims: sims}
	f.acts = &activities.Activities{Store: f.db, Payments: sims.PaymentClient(t), Mailer: sims.EmailClient(t)}
	t.Setenv("DATABASE_URL", url)
	t.Setenv("STRIPE_API_KEY", "sk_test_ops")
	t.Setenv("STRIPE_BASE_URL", sims.StripeURL)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	return f
}

// charge runs ChargeOrder once for message id with payment method pm.
func (f *opsFixture) charge(t *testing.T, id string, order int64, pm string) (activities.ChargeResult, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(f.acts)
	val, err := env.ExecuteActivity(f.acts.ChargeOrder, activities.ChargeInput{
		Consumer: "order-placed", MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", PaymentMethod: pm,
	})
	var r activities.ChargeResult
	if err == nil {
		err = val.Get(&r)
	}
	return r, err
}

func runStarter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, nil, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestPaymentsListsOpenCases(t *testing.T) {
	f := newOpsFixture(t)
	for i, id := range []string{"evt_p1", "evt_p2"} {
		if r, err := f.charge(t, id, int64(10+i), "pm_card_processing"); err != nil || r.Outcome != activities.PaymentProcessing {
			t.Fatalf("%s = %+v, %v", id, r, err)
		}
	}
	if _, err := f.charge(t, "evt_cap", 20, "pm_card_requiresCapture"); err == nil {
		t.Fatal("requires_capture was not an error")
	}
	if _, err := f.charge(t, "evt_paid", 21, "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runStarter(t, "payments", "--state", "processing")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var ids []string
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var p store.Payment
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.State != store.PaymentProcessing || p.PaymentIntentID == "" {
			t.Errorf("listed %+v", p)
		}
		ids = append(ids, p.MessageID)
	}
	if strings.Join(ids, ",") != "evt_p1,evt_p2" {
		t.Fatalf("processing = %v, want evt_p1,evt_p2 (oldest first)", ids)
	}
	if code, out, _ := runStarter(t, "payments", "--state", "unexpected"); code != exitOK || !strings.Contains(out, `"message_id":"evt_cap"`) || strings.Count(out, "\n") != 1 {
		t.Fatalf("unexpected: exit %d, %s", code, out)
	}
	if code, out, _ := runStarter(t, "payments", "--state", "unknown"); code != exitOK || out != "" {
		t.Fatalf("unknown: exit %d, %q", code, out)
	}
	if code, _, _ := runStarter(t, "payments", "--state", "succeeded"); code != exitUsage {
		t.Fatalf("a final state: exit %d, want %d", code, exitUsage)
	}
}

func TestResolveSettlesFromStripe(t *testing.T) {
	f := newOpsFixture(t)
	r, err := f.charge(t, "evt_r1", 30, "pm_card_processing")
	if err != nil || r.Outcome != activities.PaymentProcessing {
		t.Fatalf("charge = %+v, %v", r, err)
	}

	// Still processing at Stripe: recorded as it is, exit 7.
	code, out, stderr := runStarter(t, "resolve", "evt_r1")
	if code != exitStillOpen || !strings.Contains(out, `"state_after": "processing"`) {
		t.Fatalf("while processing: exit %d, %s %s", code, out, stderr)
	}

	// Stripe cannot be reached: refused, nothing changed.
	if err := f.sims.Stripe.SettleProcessing(r.PaymentIntentID, true); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRIPE_BASE_URL", "http://127.0.0.1:1")
	code, _, stderr = runStarter(t, "resolve", "evt_r1")
	if code != exitRefused || !strings.Contains(stderr, "refused") {
		t.Fatalf("stripe unreachable: exit %d, %s", code, stderr)
	}
	if p, _ := f.db.PaymentOf(context.Background(), "order-placed", "evt_r1"); p.State != store.PaymentProcessing {
		t.Fatalf("payment changed while stripe was unreachable: %+v", p)
	}

	// Stripe says succeeded: ledger, order, processed row and event.
	t.Setenv("STRIPE_BASE_URL", f.sims.StripeURL)
	code, out, stderr = runStarter(t, "resolve", "evt_r1")
	if code != exitOK {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	var rep resolveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.StateBefore != store.PaymentProcessing || rep.StateAfter != store.PaymentSucceeded || !rep.Changed || rep.Lookup != "retrieve" ||
		rep.Workflow == nil || rep.Workflow.Error == "" {
		t.Fatalf("report = %s", out)
	}
	st, err := f.db.Status(context.Background(), "order-placed", "evt_r1")
	if err != nil || st.Order.Status != store.OrderPaid || st.Processed == nil || st.Processed.Outcome != store.OutcomePaid {
		t.Fatalf("status after resolve = %+v, %v", st, err)
	}
	var events int
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE event_id = $1`, store.OrderPaidEventID("evt_r1")).Scan(&events); err != nil || events != 1 {
		t.Fatalf("order.paid events = %d, %v", events, err)
	}
	// Again: final, no call, exit 0.
	before := f.sims.Stripe.Stats().Requests
	if code, _, _ := runStarter(t, "resolve", "evt_r1"); code != exitOK || f.sims.Stripe.Stats().Requests != before {
		t.Fatalf("resolve of a final payment: exit %d, stripe requests %d → %d", code, before, f.sims.Stripe.Stats().Requests)
	}
	if code, _, _ := runStarter(t, "resolve", "evt_none"); code != exitNotFound {
		t.Fatalf("no such payment: exit %d", code)
	}
}

// TestResolveUnknownByList: a payment recorded unknown with no
// PaymentIntent ID (from before create-record-confirm) is found by a list
// over its claim's window, though Search would not see it yet.
func TestResolveUnknownByList(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()
	c, err := f.db.ClaimPayment(ctx, store.PaymentClaim{Consumer: "order-placed", MessageID: "evt_u", OrderID: 40, Amount: 1999, Currency: "usd", Key: "payment:evt_u", RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.acts.Payments.Charge(ctx, paymentRequest("evt_u", 40)); err != nil {
		t.Fatal(err)
	}
	if err := f.db.RecordPaymentUnknown(ctx, "order-placed", "evt_u", "payment:evt_u", c.Claim, "lost"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runStarter(t, "resolve", "evt_u")
	if code != exitOK || !strings.Contains(out, `"lookup": "list"`) || !strings.Contains(out, `"state_after": "succeeded"`) {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	if n := f.sims.Stripe.Stats().RequestsByOperation["search"]; n != 0 {
		t.Fatalf("search used %d times", n)
	}
}

func TestRedriveRefusal(t *testing.T) {
	for _, tc := range []struct {
		state   store.PaymentState
		pi      string
		refused bool
	}{
		{store.PaymentSucceeded, "pi_1", false},
		{store.PaymentFailed, "pi_1", false},
		{store.PaymentFailed, "", false},
		{store.PaymentClaimed, "", false},
		{store.PaymentClaimed, "pi_1", true},
		{store.PaymentProcessing, "pi_1", true},
		{store.PaymentUnknown, "", true},
		{store.PaymentUnexpected, "pi_1", true},
		{"something_new", "", true},
	} {
		p := &store.Payment{State: tc.state, PaymentIntentID: tc.pi}
		if got := redriveRefusal(store.MessageStatus{Payment: p}) != ""; got != tc.refused {
			t.Errorf("%s with %q: refused = %v, want %v", tc.state, tc.pi, got, tc.refused)
		}
	}
	if redriveRefusal(store.MessageStatus{}) != "" {
		t.Error("no payment row refused")
	}
}

func paymentRequest(id string, order int64) payment.ChargeRequest {
	return payment.ChargeRequest{IdempotencyKey: "payment:" + id, MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa"}
}

// TestRequireWithoutKeysIsBadConfiguration: EFFECTIVELY_CODEC_REQUIRE
// without keys stops the starter before it connects to anything.
func TestRequireWithoutKeysIsBadConfiguration(t *testing.T) {
	t.Setenv("EFFECTIVELY_CODEC_REQUIRE", "true")
	t.Setenv("EFFECTIVELY_CODEC_KEYS", "")
	t.Setenv("EFFECTIVELY_CODEC_KEY_FILE", "")
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	code, _, stderr := runStarter(t, "status", "evt_1")
	if code != exitUsage || !strings.Contains(stderr, "EFFECTIVELY_CODEC_KEYS") || !strings.Contains(stderr, "EFFECTIVELY_CODEC_KEY_FILE") {
		t.Errorf("exit %d, stderr %q; want %d naming both key variables", code, stderr, exitUsage)
	}
}
