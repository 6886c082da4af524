package activities_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
)

// The defects of issue 18 on the activity side, each as its user would see
// it: counts at the simulators and rows in Postgres.

// mailsWithSubject counts the mails SendGrid accepted with subject, whatever
// their key.
func mailsWithSubject(f *fixture, subject string) int {
	n := 0
	for _, m := range f.sims.SendGrid.Messages() {
		if m.Subject == subject {
			n++
		}
	}
	return n
}

// refundedAndReceipt pays order for message pid, refunds 500 of it under
// message rid and returns the refund receipt's input.
func refundedAndReceipt(t *testing.T, f *fixture, pid, rid string, order int64) activities.RefundReceiptInput {
	t.Helper()
	paid(t, f, pid, order)
	r, err := run(t, f, f.acts.RefundOrder, refundOf(rid, order, 500))
	if err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("refund = %+v, %v", r, err)
	}
	return activities.RefundReceiptInput{Consumer: "order-refund", MessageID: rid, OrderID: order, Amount: 500, Currency: "usd", RefundID: r.RefundID}
}

// TestSendRefundReceiptGraceFindsTheEarlierSend: the refund receipt's
// answer is lost after SendGrid accepted it; the retry waits for SendGrid's
// event, as the order receipt does, and does not send again.
func TestSendRefundReceiptGraceFindsTheEarlierSend(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.ResendGrace, f.acts.EventPoll = 10*time.Second, 50*time.Millisecond
	withEventWebhook(t, f)
	in := refundedAndReceipt(t, f, "evt_rg_p", "evt_rg", 60)
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: "evt_rg"}, Kind: sendgridsim.FaultLostAfter, Times: 1})
	if _, err := run(t, f, f.acts.SendRefundReceipt, in); err == nil {
		t.Fatal("a lost response was reported as sent")
	}
	r, err := run(t, f, f.acts.SendRefundReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptSent || r.ProviderMessageID == "" {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	if n := mailsWithSubject(f, "Your refund for order 60"); n != 1 {
		t.Fatalf("refund receipts delivered = %d, want 1: the retry resent although SendGrid reported the first send", n)
	}
}

// agedRefundFixture is a fixture whose Stripe simulator forgets keys after
// a second, with order paid by message pid.
func agedRefundFixture(t *testing.T, pid string, order int64) (*fixture, *stripesim.Server) {
	t.Helper()
	sim := stripesim.New(stripesim.Options{KeyTTL: time.Second})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	pay, err := payment.New(payment.Config{APIKey: "sk_test_refund_window", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	db := store.New(storetest.NewPool(t))
	f := &fixture{acts: &activities.Activities{Store: db, Payments: pay}, db: db}
	if r, err := run(t, f, f.acts.ChargeOrder, charge(pid, order, "pm_card_visa")); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge = %+v, %v", r, err)
	}
	return f, sim
}

// claimRefundAged claims in's refund as an earlier attempt did, and ages
// the claim past Stripe's key window.
func claimRefundAged(t *testing.T, f *fixture, in activities.RefundInput) store.Refund {
	t.Helper()
	ctx := context.Background()
	c, err := f.db.ClaimRefund(ctx, store.RefundClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Reason: in.Reason,
		Key: "refund:" + in.MessageID, RequestHash: activities.RequestHash(in),
	})
	if err != nil || c.Decision != store.RefundOwned {
		t.Fatalf("claim = %+v, %v", c, err)
	}
	if _, err := f.db.Pool().Exec(ctx, `UPDATE refunds SET created_at = now() - interval '25 hours' WHERE message_id = $1`, in.MessageID); err != nil {
		t.Fatal(err)
	}
	return c.Refund
}

// refundAtStripe refunds amount of pi for in's message under key, as an
// earlier attempt (or someone else) did, straight at Stripe.
func refundAtStripe(t *testing.T, f *fixture, in activities.RefundInput, key, pi string, amount int64) {
	t.Helper()
	if _, err := f.acts.Payments.Refund(context.Background(), payment.RefundRequest{
		IdempotencyKey: key, MessageID: in.MessageID, OrderID: in.OrderID,
		PaymentIntentID: pi, Amount: amount, Reason: in.Reason,
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRefundOrderPastTheKeyWindowListsFirst: an attempt refunded and died
// before its record; the redrive comes after Stripe forgot the key. The
// activity lists the PaymentIntent's refunds first and adopts the one the
// message made: one refund at Stripe.
func TestRefundOrderPastTheKeyWindowListsFirst(t *testing.T) {
	f, sim := agedRefundFixture(t, "evt_rw_p", 61)
	in := refundOf("evt_rw", 61, 500)
	r := claimRefundAged(t, f, in)
	refundAtStripe(t, f, in, "refund:evt_rw", r.PaymentIntentID, in.Amount)
	time.Sleep(1100 * time.Millisecond) // the key expires at the simulator

	res, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || res.Outcome != activities.RefundRefunded || !res.Reconciled {
		t.Fatalf("refund past the key window = %+v, %v; want refunded, reconciled", res, err)
	}
	if n := sim.Stats().RefundsByMessage["evt_rw"]; n != 1 {
		t.Fatalf("stripe refunds of evt_rw = %d, want 1", n)
	}
	if got := refunded(t, f, 61); got != 500 {
		t.Errorf("refunded_amount = %d, want 500", got)
	}
}

// TestRefundOrderPastTheKeyWindowFindsItBehindAHundredOthers is the same
// redrive after the PaymentIntent got 100 more refunds: the message's is
// on the list's second page, and the list reads every page, so it is
// adopted, not made again.
func TestRefundOrderPastTheKeyWindowFindsItBehindAHundredOthers(t *testing.T) {
	f, sim := agedRefundFixture(t, "evt_rh_p", 64)
	in := refundOf("evt_rh", 64, 500)
	r := claimRefundAged(t, f, in)
	refundAtStripe(t, f, in, "refund:evt_rh", r.PaymentIntentID, in.Amount)
	for i := range 100 {
		id := fmt.Sprintf("evt_rh_other_%d", i)
		if _, err := f.acts.Payments.Refund(context.Background(), payment.RefundRequest{
			IdempotencyKey: "refund:" + id, MessageID: id, OrderID: 64, PaymentIntentID: r.PaymentIntentID, Amount: 1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // the key expires at the simulator

	res, err := run(t, f, f.acts.RefundOrder, in)
	if n := sim.Stats().RefundsByMessage["evt_rh"]; n != 1 {
		t.Fatalf("stripe refunds of evt_rh = %d, want 1 (result %+v, %v)", n, res, err)
	}
	if err != nil || res.Outcome != activities.RefundRefunded || !res.Reconciled {
		t.Fatalf("refund past the key window = %+v, %v; want refunded, reconciled", res, err)
	}
}

// TestRefundOrderPastTheKeyWindowRefusesAnotherAmount: the list finds a
// refund naming the message but of another amount. It is not adopted and
// no new refund is made: an operator decides.
func TestRefundOrderPastTheKeyWindowRefusesAnotherAmount(t *testing.T) {
	f, sim := agedRefundFixture(t, "evt_rx_p", 62)
	in := refundOf("evt_rx", 62, 500)
	r := claimRefundAged(t, f, in)
	refundAtStripe(t, f, in, "decoy:evt_rx", r.PaymentIntentID, 300)
	_, err := run(t, f, f.acts.RefundOrder, in)
	var appErr *temporal.ApplicationError
	if !isType(err, activities.ErrTypeUnexpectedState) || !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("err = %v; want a non-retryable %s", err, activities.ErrTypeUnexpectedState)
	}
	if n := sim.Stats().RefundsByMessage["evt_rx"]; n != 1 {
		t.Fatalf("stripe refunds of evt_rx = %d, want 1 (the other amount's, nothing new)", n)
	}
	got, err := f.db.RefundOf(context.Background(), in.Consumer, in.MessageID)
	if err != nil || got.State != store.RefundClaimed {
		t.Fatalf("refund row = %+v, %v; want still claimed for an operator", got, err)
	}
}

// TestRefundOrderPastTheKeyWindowWithNothingListedRefunds: the earlier
// attempt never reached Stripe; the list finds nothing and the refund is
// made once.
func TestRefundOrderPastTheKeyWindowWithNothingListedRefunds(t *testing.T) {
	f, sim := agedRefundFixture(t, "evt_rn_p", 63)
	in := refundOf("evt_rn", 63, 500)
	claimRefundAged(t, f, in)
	res, err := run(t, f, f.acts.RefundOrder, in)
	if err != nil || res.Outcome != activities.RefundRefunded {
		t.Fatalf("refund = %+v, %v", res, err)
	}
	if st := sim.Stats(); st.RefundsByMessage["evt_rn"] != 1 || st.RequestsByOperation["list_refunds"] == 0 {
		t.Fatalf("stripe: %d refunds of evt_rn, requests %v; want 1 refund after a list", st.RefundsByMessage["evt_rn"], st.RequestsByOperation)
	}
}

// authOutcomes is the count of effect outcomes with result provider_auth
// in reg, by effect.
func authOutcomes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameEffectOutcomes {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == "provider_auth" {
				out[labels["effect"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestReceiptAuthErrorsAreRetriedAndAlert: SendGrid answers 401, 403 or 404
// (a rotated or mistyped key, a wrong base URL). That is our configuration,
// not the receipt's outcome: the attempt fails retryably, nothing terminal
// is recorded, the alert's counter moves, and once fixed the receipt goes.
func TestReceiptAuthErrorsAreRetriedAndAlert(t *testing.T) {
	for i, status := range []int{401, 403, 404} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f := newFixture(t, "")
			reg := prometheus.NewRegistry()
			f.acts.Metrics = metrics.New(reg)
			order := int64(64 + 10*i)
			in := refundedAndReceipt(t, f, fmt.Sprintf("evt_auth_p%d", status), fmt.Sprintf("evt_auth_r%d", status), order)
			rec := activities.ReceiptInput{Consumer: "order-placed", MessageID: fmt.Sprintf("evt_auth_p%d", status), OrderID: order, Amount: 1999, Currency: "usd", To: "ada@example.com"}
			f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: status, Times: 2})

			r, err := run(t, f, f.acts.SendReceipt, rec)
			var appErr *temporal.ApplicationError
			if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
				t.Fatalf("receipt on %d = %+v, %v; want a retryable error", status, r, err)
			}
			rr, err := run(t, f, f.acts.SendRefundReceipt, in)
			if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
				t.Fatalf("refund receipt on %d = %+v, %v; want a retryable error", status, rr, err)
			}
			st, err := f.db.Status(context.Background(), rec.Consumer, rec.MessageID)
			if err != nil || st.Order.ReceiptStatus == "failed" {
				t.Fatalf("receipt status %+v, %v: a configuration error was recorded as the receipt's outcome", st.Order, err)
			}
			if got := authOutcomes(t, reg); got["receipt"] != 1 || got["refund_receipt"] != 1 {
				t.Errorf("provider_auth outcomes = %v; want one per receipt kind", got)
			}

			// The key is fixed: both go, once each.
			if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || r.Outcome != activities.ReceiptSent {
				t.Fatalf("receipt after the fix = %+v, %v", r, err)
			}
			if r, err := run(t, f, f.acts.SendRefundReceipt, in); err != nil || r.Outcome != activities.ReceiptSent {
				t.Fatalf("refund receipt after the fix = %+v, %v", r, err)
			}
			if f.sims.SendGrid.Stats().Deliveries != 2 {
				t.Errorf("deliveries = %d, want 2", f.sims.SendGrid.Stats().Deliveries)
			}
		})
	}
}

// TestRefundAuthErrorIsRetried: Stripe refuses the key for a refund. It is
// retried, not recorded.
func TestRefundAuthErrorIsRetried(t *testing.T) {
	f := newFixture(t, "")
	reg := prometheus.NewRegistry()
	f.acts.Metrics = metrics.New(reg)
	paid(t, f, "evt_ra_p", 67)
	in := refundOf("evt_ra", 67, 500)
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_ra"}, Kind: stripesim.FaultErrorBefore, Status: 401, Times: 1})
	_, err := run(t, f, f.acts.RefundOrder, in)
	var appErr *temporal.ApplicationError
	if err == nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
		t.Fatalf("refund on 401 = %v; want a retryable error", err)
	}
	if got := authOutcomes(t, reg); got["refund"] != 1 {
		t.Errorf("provider_auth outcomes = %v; want one for the refund", got)
	}
	if r, err := run(t, f, f.acts.RefundOrder, in); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("refund after the fix = %+v, %v", r, err)
	}
}

// TestOrderAndRefundReceiptsSharingAMessageID: an order.placed and an
// order.refund_requested carry the same message ID (the inbox keys by
// consumer and message ID). Each gets its receipt, under its own key.
func TestOrderAndRefundReceiptsSharingAMessageID(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_same", 68)
	rec := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_same", OrderID: 68, Amount: 1999, Currency: "usd", To: "ada@example.com"}
	if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("receipt = %+v, %v", r, err)
	}
	rf, err := run(t, f, f.acts.RefundOrder, refundOf("evt_same", 68, 500))
	if err != nil || rf.Outcome != activities.RefundRefunded {
		t.Fatalf("refund = %+v, %v", rf, err)
	}
	in := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_same", OrderID: 68, Amount: 500, Currency: "usd", RefundID: rf.RefundID}
	r, err := run(t, f, f.acts.SendRefundReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("refund receipt of a message ID an order receipt also has = %+v, %v; want sent", r, err)
	}
	if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || !r.Recorded || r.Outcome != activities.ReceiptSent {
		t.Fatalf("order receipt retry = %+v, %v; want recorded", r, err)
	}
	if a, b := mailsWithSubject(f, "Your receipt for order 68"), mailsWithSubject(f, "Your refund for order 68"); a != 1 || b != 1 {
		t.Fatalf("receipts %d, refund receipts %d; want 1 each", a, b)
	}
}

// TestRefundReceiptUnderTheLegacyKey: before the refund receipt had its own
// effect name, its ledger row was "email:<message id>". A row left there by
// the previous release is honoured on deploy: a settled one is not sent
// again, and one in flight, whose mail SendGrid accepted, is not resent once
// SendGrid's event names the legacy key.
func TestRefundReceiptUnderTheLegacyKey(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.ResendGrace, f.acts.EventPoll = 10*time.Second, 50*time.Millisecond
	withEventWebhook(t, f)
	ctx := context.Background()

	// In flight under the old release: claimed, sent, not recorded.
	in := refundedAndReceipt(t, f, "evt_leg_p", "evt_leg", 69)
	mail, hash := activities.LegacyRefundMail("ada@example.com", in)
	if d, _, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: in.Consumer, MessageID: in.MessageID, Key: "email:evt_leg", RequestHash: hash, Policy: store.AtLeastOnce}); err != nil || d != store.EmailSend {
		t.Fatalf("legacy claim = %s, %v", d, err)
	}
	if _, err := f.acts.Mailer.Send(ctx, mail); err != nil {
		t.Fatal(err)
	}
	r, err := run(t, f, f.acts.SendRefundReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("refund receipt in flight under the legacy key = %+v, %v", r, err)
	}
	if n := mailsWithSubject(f, "Your refund for order 69"); n != 1 {
		t.Fatalf("refund receipts delivered = %d, want 1: the legacy row's send was repeated", n)
	}
	if e, err := f.db.Effect(ctx, "email:evt_leg"); err != nil || e.State != store.StateSucceeded {
		t.Fatalf("legacy row = %+v, %v; want succeeded", e, err)
	}

	// Settled under the old release.
	in2 := refundedAndReceipt(t, f, "evt_leg2_p", "evt_leg2", 79)
	_, hash2 := activities.LegacyRefundMail("ada@example.com", in2)
	_, e, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: in2.Consumer, MessageID: in2.MessageID, Key: "email:evt_leg2", RequestHash: hash2, Policy: store.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.RecordEmailSent(ctx, "email:evt_leg2", e.Claim, 0, "x_legacy"); err != nil {
		t.Fatal(err)
	}
	r, err = run(t, f, f.acts.SendRefundReceipt, in2)
	if err != nil || !r.Recorded || r.ProviderMessageID != "x_legacy" {
		t.Fatalf("refund receipt settled under the legacy key = %+v, %v; want the record", r, err)
	}
	if n := mailsWithSubject(f, "Your refund for order 79"); n != 0 {
		t.Fatalf("refund receipts delivered = %d, want 0", n)
	}
}

// TestChargeAuthErrorIsRetriedAndAlerts: Stripe refuses the key for a
// charge. It is retried under the same keys, counted for the alert, and
// charges once the key is fixed.
func TestChargeAuthErrorIsRetriedAndAlerts(t *testing.T) {
	f := newFixture(t, "")
	reg := prometheus.NewRegistry()
	f.acts.Metrics = metrics.New(reg)
	in := charge("evt_ca", 66, "pm_card_visa")
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_ca"}, Kind: stripesim.FaultErrorBefore, Status: 401, Times: 1})
	_, err := run(t, f, f.acts.ChargeOrder, in)
	var appErr *temporal.ApplicationError
	if !isType(err, activities.ErrTypeProviderAuth) || (errors.As(err, &appErr) && appErr.NonRetryable()) {
		t.Fatalf("charge on 401 = %v; want a retryable %s", err, activities.ErrTypeProviderAuth)
	}
	if got := authOutcomes(t, reg); got["payment"] != 1 {
		t.Errorf("provider_auth outcomes = %v; want one for the payment", got)
	}
	if r, err := run(t, f, f.acts.ChargeOrder, in); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge after the fix = %+v, %v", r, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage["evt_ca"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

// TestOrderReceiptBesideALegacyRefundReceipt: a refund receipt the previous
// release recorded under "email:<message id>" holds the key an order.placed
// of the same message ID would take for its receipt. The order's receipt is
// then sent under "orderemail:<message id>", once, and stays there when the
// legacy row is gone (retention): a retry never moves to the other key.
func TestOrderReceiptBesideALegacyRefundReceipt(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	ctx := context.Background()

	// The previous release's refund receipt of message evt_lx, settled.
	in := refundedAndReceipt(t, f, "evt_lx_p", "evt_lx", 81)
	_, hash := activities.LegacyRefundMail("ada@example.com", in)
	_, e, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: in.Consumer, MessageID: in.MessageID, Key: "email:evt_lx", RequestHash: hash, Policy: store.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.RecordEmailSent(ctx, "email:evt_lx", e.Claim, 0, "x_legacy_refund"); err != nil {
		t.Fatal(err)
	}

	// An order.placed with the same message ID: its charge records the
	// payment (its statement cannot claim the receipt), then SendReceipt.
	c := charge("evt_lx", 82, "pm_card_visa")
	c.ReceiptTo, c.ReceiptBudget = "ada@example.com", time.Second
	if r, err := run(t, f, f.acts.ChargeOrder, c); err != nil || r.Outcome != activities.PaymentPaid || r.Receipt != nil {
		t.Fatalf("charge = %+v, %v; want paid, no receipt claimed with it", r, err)
	}
	rec := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_lx", OrderID: 82, Amount: 1999, Currency: "usd", To: "ada@example.com"}
	r, err := run(t, f, f.acts.SendReceipt, rec)
	if err != nil || r.Outcome != activities.ReceiptSent || r.Recorded {
		t.Fatalf("order receipt beside a legacy refund receipt = %+v, %v; want sent", r, err)
	}
	if e, err := f.db.Effect(ctx, "orderemail:evt_lx"); err != nil || e.State != store.StateSucceeded || e.Consumer != "order-placed" {
		t.Fatalf("order receipt's row = %+v, %v; want succeeded under orderemail:evt_lx", e, err)
	}
	if e, err := f.db.Effect(ctx, "email:evt_lx"); err != nil || e.Consumer != "order-refund" || e.ProviderRef != "x_legacy_refund" {
		t.Fatalf("legacy refund receipt's row = %+v, %v; want it untouched", e, err)
	}

	// Retention deletes the legacy row; a retry stays on its own key.
	if _, err := f.db.Pool().Exec(ctx, `DELETE FROM effects WHERE key = 'email:evt_lx'`); err != nil {
		t.Fatal(err)
	}
	if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || !r.Recorded || r.Outcome != activities.ReceiptSent {
		t.Fatalf("order receipt retry = %+v, %v; want recorded", r, err)
	}
	if n := mailsWithSubject(f, "Your receipt for order 82"); n != 1 {
		t.Fatalf("order receipts delivered = %d, want 1", n)
	}
}
