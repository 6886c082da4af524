package activities_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
)

// paid charges order (1999 usd) for message id, with the order.placed
// message in the inbox as the intake would have left it (the refund
// receipt's address is read from there).
func paid(t *testing.T, f *fixture, id string, order int64) {
	t.Helper()
	raw := fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`, id, order)
	if _, err := f.db.InsertInbox(context.Background(), store.InboxEntry{Consumer: "order-placed", MessageID: id, Payload: raw, PayloadHash: "h-" + id, Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if r, err := run(t, f, f.acts.ChargeOrder, charge(id, order, "pm_card_visa")); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge = %+v, %v", r, err)
	}
}

func refundOf(id string, order, amount int64) activities.RefundInput {
	return activities.RefundInput{Consumer: "order-refund", MessageID: id, OrderID: order, Amount: amount, Reason: "requested_by_customer"}
}

func refunded(t *testing.T, f *fixture, order int64) int64 {
	t.Helper()
	r, _, err := f.db.RefundedAmount(context.Background(), order)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func outcomeOf(t *testing.T, f *fixture, consumer, id string) store.Outcome {
	t.Helper()
	st, err := f.db.Status(context.Background(), consumer, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processed == nil {
		return ""
	}
	return st.Processed.Outcome
}

func TestRefundOrderRefundsOnceAndSendsOneReceipt(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_p1", 50)
	in := refundOf("evt_r1", 50, 500)
	r1, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || r1.Outcome != activities.RefundRefunded || r1.RefundID == "" || r1.Currency != "usd" {
		t.Fatalf("refund = %+v, %v", r1, err)
	}
	r2, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || r2.Outcome != activities.RefundRefunded || r2.RefundID != r1.RefundID || !r2.Recorded {
		t.Fatalf("retry = %+v, %v", r2, err)
	}
	if st := f.sims.Stripe.Stats(); st.RefundsByMessage["evt_r1"] != 1 || st.RefundedAmount != 500 {
		t.Errorf("stripe saw %d refunds of evt_r1, %d refunded", st.RefundsByMessage["evt_r1"], st.RefundedAmount)
	}
	if got := refunded(t, f, 50); got != 500 {
		t.Errorf("refunded_amount = %d, want 500", got)
	}
	if o := outcomeOf(t, f, "order-refund", "evt_r1"); o != store.OutcomeRefunded {
		t.Errorf("processed outcome = %q", o)
	}

	rin := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_r1", OrderID: 50, Amount: 500, Currency: "usd", RefundID: r1.RefundID}
	m1, err := run(t, f, f.acts.SendRefundReceipt, rin)
	if err != nil || m1.Outcome != activities.ReceiptSent {
		t.Fatalf("refund receipt = %+v, %v", m1, err)
	}
	m2, err := run(t, f, f.acts.SendRefundReceipt, rin)
	if err != nil || m2.Outcome != activities.ReceiptSent || !m2.Recorded {
		t.Fatalf("retry = %+v, %v", m2, err)
	}
	mails := f.sims.SendGrid.Messages()
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:evt_r1"]; n != 1 || len(mails) != 1 || len(mails[0].To) != 1 || mails[0].To[0] != "ada@example.com" || mails[0].Subject != "Your refund for order 50" {
		t.Errorf("refund receipts = %d, mails %+v", n, mails)
	}
	st, err := f.db.Status(context.Background(), "order-placed", "evt_p1")
	if err != nil || st.Order.ReceiptStatus != "none" {
		t.Errorf("the refund receipt changed the order's receipt status: %+v, %v", st.Order, err)
	}
}

func TestRefundBeyondWhatRemainsIsRefusedWithoutStripe(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_p2", 51)
	if r, err := run(t, f, f.acts.RefundOrder, refundOf("evt_a", 51, 1500)); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("first refund = %+v, %v", r, err)
	}
	requests := f.sims.Stripe.Stats().Requests
	for range 2 { // the retry replays the decision
		r, err := run(t, f, f.acts.RefundOrder, refundOf("evt_b", 51, 600))
		if err != nil || r.Outcome != activities.RefundExceedsPayment || r.Paid != 1999 || r.Refunded != 1500 {
			t.Fatalf("over-refund = %+v, %v", r, err)
		}
	}
	if st := f.sims.Stripe.Stats(); st.Requests != requests || st.RefundsRefused != 0 {
		t.Errorf("stripe was called for a refund beyond the payment: %d requests (before %d), %d refused", st.Requests, requests, st.RefundsRefused)
	}
	if o := outcomeOf(t, f, "order-refund", "evt_b"); o != store.OutcomeRefundExceedsPayment {
		t.Errorf("processed outcome = %q", o)
	}
	if r, err := run(t, f, f.acts.RefundOrder, refundOf("evt_c", 51, 499)); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("the last 499 = %+v, %v", r, err)
	}
	if got := refunded(t, f, 51); got != 1999 {
		t.Errorf("refunded_amount = %d, want 1999", got)
	}
}

func TestRefundOfOrderNeverPaid(t *testing.T) {
	f := newFixture(t, "")
	if r, err := run(t, f, f.acts.ChargeOrder, charge("evt_dec", 52, "pm_card_chargeDeclined")); err != nil || r.Outcome != activities.PaymentFailed {
		t.Fatalf("declined charge = %+v, %v", r, err)
	}
	requests := f.sims.Stripe.Stats().Requests
	for _, in := range []activities.RefundInput{refundOf("evt_n1", 52, 100), refundOf("evt_n2", 999, 100)} {
		r, err := run(t, f, f.acts.RefundOrder, in)
		if err != nil || r.Outcome != activities.RefundOrderNotPaid {
			t.Errorf("refund of order %d = %+v, %v", in.OrderID, r, err)
		}
		if o := outcomeOf(t, f, "order-refund", in.MessageID); o != store.OutcomeOrderNotPaid {
			t.Errorf("processed outcome of %s = %q", in.MessageID, o)
		}
	}
	if n := f.sims.Stripe.Stats().Requests; n != requests {
		t.Errorf("stripe was called: %d requests, before %d", n, requests)
	}
}

func TestRefundWaitsForAPaymentInProgress(t *testing.T) {
	f := newFixture(t, "")
	if _, err := f.db.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: "order-placed", MessageID: "evt_p3", OrderID: 53, Amount: 1999, Currency: "usd", Key: "payment:evt_p3", RequestHash: "x",
	}); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, f, f.acts.RefundOrder, refundOf("evt_w", 53, 100))
	var app *temporal.ApplicationError
	if !isType(err, activities.ErrTypePaymentPending) || !errors.As(err, &app) || !app.NonRetryable() {
		t.Fatalf("refund of a claimed payment = %v, want a non-retryable %s (the workflow waits)", err, activities.ErrTypePaymentPending)
	}
	if o := outcomeOf(t, f, "order-refund", "evt_w"); o != "" {
		t.Errorf("a pending refund was recorded as %q", o)
	}
}

// TestConcurrentRefundsNeverExceedThePayment races refunds of one payment:
// the payment row's lock decides them one at a time, so exactly as many
// pass as fit.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_p4", 54)
	const n = 8
	outcomes := make([]activities.RefundOutcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := run(t, f, f.acts.RefundOrder, refundOf(fmt.Sprintf("evt_c%d", i), 54, 300))
			if err != nil {
				t.Errorf("refund %d: %v", i, err)
			}
			outcomes[i] = r.Outcome
		})
	}
	wg.Wait()
	count := map[activities.RefundOutcome]int{}
	for _, o := range outcomes {
		count[o]++
	}
	// 6 × 300 = 1800 fit in 1999; the 7th and 8th do not.
	if count[activities.RefundRefunded] != 6 || count[activities.RefundExceedsPayment] != 2 {
		t.Errorf("outcomes = %v, want 6 refunded and 2 refused", count)
	}
	if got := refunded(t, f, 54); got != 1800 {
		t.Errorf("refunded_amount = %d, want 1800", got)
	}
	if st := f.sims.Stripe.Stats(); st.RefundedAmount != 1800 || st.RefundsRefused != 0 {
		t.Errorf("stripe refunded %d (%d refused)", st.RefundedAmount, st.RefundsRefused)
	}
}

// TestRefundAmbiguousAnswerIsReconciledByList: Stripe saves a 500 after it
// created the refund, so the key only replays the 500; the retry lists the
// PaymentIntent's refunds and records the one it finds, without a second
// refund.
func TestRefundAmbiguousAnswerIsReconciledByList(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_p5", 55)
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_amb"}, Kind: stripesim.FaultErrorAfter, Times: 1})
	in := refundOf("evt_amb", 55, 700)
	if _, err := run(t, f, f.acts.RefundOrder, in); err == nil {
		t.Fatal("the first attempt saw a 500 and succeeded")
	}
	r, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || r.Outcome != activities.RefundRefunded || !r.Reconciled {
		t.Fatalf("retry after the saved 500 = %+v, %v", r, err)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage["evt_amb"]; n != 1 {
		t.Errorf("refunds = %d, want 1", n)
	}
	if got := refunded(t, f, 55); got != 700 {
		t.Errorf("refunded_amount = %d, want 700", got)
	}
}

// TestRefundsNeverExceedPaymentInTheDatabase checks the rule where it
// lives: a statement that forgets it is refused by the CHECK.
func TestRefundsNeverExceedPaymentInTheDatabase(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_p6", 56)
	_, err := f.db.Pool().Exec(context.Background(), `UPDATE payments SET refunded_amount = amount + 1 WHERE order_id = 56`)
	if err == nil {
		t.Fatal("the database accepted refunds beyond the payment")
	}
	if got := refunded(t, f, 56); got != 0 {
		t.Errorf("refunded_amount = %d", got)
	}
}

// TestRefundBeforeItsPayment: asked to wait, a refund of an order with no
// payment yet fails PaymentMissing and records nothing; once the order is
// paid the same message refunds (its request hash unchanged by the flag);
// a refund not asked to wait still ends order_not_paid.
func TestRefundBeforeItsPayment(t *testing.T) {
	f := newFixture(t, "")
	in := refundOf("evt_early", 53, 300)
	in.AwaitPayment = true
	_, err := run(t, f, f.acts.RefundOrder, in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypePaymentMissing || !app.NonRetryable() {
		t.Fatalf("refund before the payment: %v, want a non-retryable %s", err, activities.ErrTypePaymentMissing)
	}
	if o := outcomeOf(t, f, "order-refund", in.MessageID); o != "" {
		t.Fatalf("recorded %q while waiting for the payment", o)
	}
	paid(t, f, "evt_pay53", 53)
	if r, err := run(t, f, f.acts.RefundOrder, in); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("refund once paid = %+v, %v", r, err)
	}
	in.AwaitPayment = false // the same request: the hash ignores the flag
	if r, err := run(t, f, f.acts.RefundOrder, in); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("the same refund without the flag = %+v, %v", r, err)
	}
	late := refundOf("evt_nowait", 54, 100)
	if r, err := run(t, f, f.acts.RefundOrder, late); err != nil || r.Outcome != activities.RefundOrderNotPaid {
		t.Fatalf("refund not waiting = %+v, %v", r, err)
	}
}

// runLocally runs fn as a local activity, as the workflow's first attempt
// does.
func runLocally[In, Out any](t *testing.T, f *fixture, fn func(context.Context, In) (Out, error), in In) Out {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(f.acts)
	val, err := env.ExecuteLocalActivity(fn, in)
	if err != nil {
		t.Fatal(err)
	}
	var out Out
	if err := val.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRefundLocallyThenRegular: the local first attempts refund and mail
// once under the same keys and ledger as the regular activities, so a
// regular attempt after them (the workflow's fallback, or a retry after a
// lost answer) replays the record and sends nothing; a failure comes back
// as data, with its type and retryability.
func TestRefundLocallyThenRegular(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_pl", 57)
	in := refundOf("evt_rl", 57, 300)
	lr := runLocally(t, f, f.acts.RefundOrderLocally, in)
	if lr.Err != nil || lr.Result.Outcome != activities.RefundRefunded || lr.Result.RefundID == "" {
		t.Fatalf("local refund = %+v", lr)
	}
	again, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || again.RefundID != lr.Result.RefundID || !again.Recorded {
		t.Fatalf("regular after local = %+v, %v; want the recorded refund", again, err)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage["evt_rl"]; n != 1 {
		t.Fatalf("stripe saw %d refunds of evt_rl, want 1", n)
	}
	rin := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_rl", OrderID: 57, Amount: 300, Currency: "usd", RefundID: lr.Result.RefundID}
	if lm := runLocally(t, f, f.acts.SendRefundReceiptLocally, rin); lm.Err != nil || lm.Result.Outcome != activities.ReceiptSent {
		t.Fatalf("local receipt = %+v", lm)
	}
	if m, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || m.Outcome != activities.ReceiptSent {
		t.Fatalf("regular receipt after local = %+v, %v", m, err)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:evt_rl"]; n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}

	// No payment yet: the local attempt says so as data, non-retryable,
	// for the workflow to wait; nothing is claimed or sent.
	early := refundOf("evt_rm0", 58, 100)
	early.AwaitPayment = true
	if lm := runLocally(t, f, f.acts.RefundOrderLocally, early); lm.Err == nil || lm.Err.Type != activities.ErrTypePaymentMissing || !lm.Err.NonRetryable {
		t.Fatalf("local refund of an unpaid order = %+v, want a non-retryable %s", lm, activities.ErrTypePaymentMissing)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage["evt_rm0"]; n != 0 {
		t.Fatalf("stripe saw %d refunds of evt_rm0", n)
	}
}
