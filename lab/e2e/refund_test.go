package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

func refundMsg(id string, orderID, amount int64) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.refund_requested", "data": {"order_id": %d, "amount": %d, "reason": "requested_by_customer"}}`, id, orderID, amount)
}

// waitRefund returns a refund workflow's result once it has closed.
func waitRefund(t *testing.T, s *testenv.Stack, messageID string) workflows.RefundStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var st workflows.RefundStatus
	if err := s.Client.GetWorkflow(ctx, "order-refund/"+messageID, "").Get(ctx, &st); err != nil {
		t.Fatalf("workflow order-refund/%s: %v", messageID, err)
	}
	return st
}

// TestRefunds runs refund messages through the real stack: a refund within
// the payment is made once at Stripe with one receipt, however many copies
// arrive; a refund beyond what remains and one for an order never paid are
// recorded as such, and Stripe never hears of them.
func TestRefunds(t *testing.T) {
	// A refund of an order with no payment waits that long for one.
	const await = 3 * time.Second
	s := testenv.NewStack(t, testenv.StackOptions{Workflows: workflows.Config{RefundAwaitPayment: await}})
	ctx := context.Background()
	if r := accept(t, s, order("evt_rf_o", 61, "pm_card_visa")); r.Status != intake.StatusStarted {
		t.Fatalf("order = %+v", r)
	}
	if st := wait(t, s, "evt_rf_o"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("order outcome = %+v", st)
	}

	raw := refundMsg("evt_rf_1", 61, 500)
	if r := accept(t, s, raw); r.Status != intake.StatusStarted || r.WorkflowID != "order-refund/evt_rf_1" {
		t.Fatalf("refund = %+v", r)
	}
	if r := accept(t, s, raw); r.Status != intake.StatusDuplicate {
		t.Fatalf("copy of the refund = %+v", r)
	}
	st := waitRefund(t, s, "evt_rf_1")
	if st.Outcome != workflows.OutcomeRefunded || st.Refund.RefundID == "" {
		t.Fatalf("refund outcome = %+v", st)
	}
	if r := accept(t, s, raw); r.Status != intake.StatusDuplicate {
		t.Fatalf("copy after completion = %+v", r)
	}

	// 1999 paid, 500 refunded: 1500 more is too much.
	accept(t, s, refundMsg("evt_rf_2", 61, 1500))
	if st := waitRefund(t, s, "evt_rf_2"); st.Outcome != workflows.OutcomeRefundExceedsPayment || st.Receipt != nil {
		t.Errorf("over-refund outcome = %+v", st)
	}
	start := time.Now()
	accept(t, s, refundMsg("evt_rf_3", 999, 100))
	if st := waitRefund(t, s, "evt_rf_3"); st.Outcome != workflows.OutcomeOrderNotPaid || time.Since(start) < await {
		t.Errorf("refund of an unknown order = %+v after %s; want order_not_paid once the %s wait is over", st, time.Since(start), await)
	}

	stripe, mail := s.Sims.Stripe.Stats(), s.Sims.SendGrid.Stats()
	if stripe.Refunds != 1 || stripe.RefundsByMessage["evt_rf_1"] != 1 || stripe.RefundedAmount != 500 || stripe.RefundsRefused != 0 {
		t.Errorf("stripe: %d refunds (%v), %d refunded, %d refused", stripe.Refunds, stripe.RefundsByMessage, stripe.RefundedAmount, stripe.RefundsRefused)
	}
	if n := mail.DeliveriesByKey["refundemail:evt_rf_1"]; n != 1 {
		t.Errorf("refund receipts = %d, want 1", n)
	}
	for _, id := range []string{"evt_rf_2", "evt_rf_3"} {
		if n := mail.DeliveriesByKey["refundemail:"+id]; n != 0 {
			t.Errorf("%s: %d receipts for a refund that did not happen", id, n)
		}
	}
	ms, err := s.Store.Status(ctx, message.ConsumerRefundRequested, "evt_rf_1")
	if err != nil {
		t.Fatal(err)
	}
	if ms.Refund == nil || ms.Refund.State != store.RefundSucceeded || ms.Refund.RefundID != st.Refund.RefundID ||
		ms.Processed == nil || ms.Processed.Outcome != store.OutcomeRefunded || ms.Inbox.Duplicates != 2 {
		t.Errorf("postgres: refund %+v processed %+v inbox %+v", ms.Refund, ms.Processed, ms.Inbox)
	}
	if refunded, paid, err := s.Store.RefundedAmount(ctx, 61); err != nil || refunded != 500 || paid != 1999 {
		t.Errorf("refunded %d of %d, %v", refunded, paid, err)
	}
	// The short path: the intake claimed the refund with its inbox row (in
	// its transaction: the same now()), the local refund took that claim
	// (claim 1, no claim of its own), and its record claimed the receipt,
	// which it sent (claim 1).
	for _, key := range []string{"refund:evt_rf_1", "refundemail:evt_rf_1"} {
		if e, err := s.Store.Effect(ctx, key); err != nil || e.Claim != 1 || e.State != store.StateSucceeded {
			t.Errorf("%s = %+v, %v; want succeeded under claim 1", key, e, err)
		}
	}
	if !ms.Refund.CreatedAt.Equal(ms.Inbox.ReceivedAt) {
		t.Errorf("refund claimed at %s, its message recorded at %s: the intake did not claim it", ms.Refund.CreatedAt, ms.Inbox.ReceivedAt)
	}
	if len(st.Fallbacks) != 0 || st.Refund.Receipt == nil {
		t.Errorf("refund status = %+v; want the local refund, its receipt sent with it", st)
	}
	if n := count(t, s, `SELECT count(*) FROM processed_messages WHERE consumer = 'order-refund'`); n != 3 {
		t.Errorf("processed refund rows = %d, want 3", n)
	}
	if n := workflowsFor(t, s.Client, "evt_rf_1"); n != 1 {
		t.Errorf("refund workflows = %d, want 1", n)
	}
}

// sendFile sends a file of messages through the intake as `starter send`
// does, and returns the intake's results in order.
func sendFile(t *testing.T, s *testenv.Stack, path string) []intake.Result {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []intake.Result
	err = s.Intake.Routes().DecodeStream(f, func(_ int, raw []byte, m *message.Message, derr error) error {
		var (
			res intake.Result
			err error
		)
		if derr != nil {
			res, err = s.Intake.Accept(context.Background(), raw, "test")
		} else {
			res, err = s.Intake.AcceptMessage(context.Background(), m, "test")
		}
		out = append(out, res)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExampleRefunds sends examples/orders.jsonl, then, once the orders
// settled, examples/refunds.jsonl, and checks each refund line does what
// examples/README.md says.
func TestExampleRefunds(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	for _, r := range sendFile(t, s, filepath.Join(testenv.RepoRoot(), "examples", "orders.jsonl")) {
		if r.Status == intake.StatusStarted {
			wait(t, s, r.MessageID)
		}
	}
	res := sendFile(t, s, filepath.Join(testenv.RepoRoot(), "examples", "refunds.jsonl"))
	want := []struct {
		status  intake.Status
		outcome workflows.Outcome
	}{
		{intake.StatusStarted, workflows.OutcomeRefunded},
		{intake.StatusDuplicate, ""},
		{intake.StatusStarted, workflows.OutcomeRefundExceedsPayment},
		{intake.StatusStarted, workflows.OutcomeRefunded},
		{intake.StatusStarted, workflows.OutcomeOrderNotPaid},
		{intake.StatusInvalid, ""},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(res), len(want), res)
	}
	for i, w := range want {
		if res[i].Status != w.status {
			t.Errorf("line %d: status %q, want %q (%+v)", i+1, res[i].Status, w.status, res[i])
			continue
		}
		if w.outcome != "" {
			if st := waitRefund(t, s, res[i].MessageID); st.Outcome != w.outcome {
				t.Errorf("line %d (%s): outcome %q, want %q", i+1, res[i].MessageID, st.Outcome, w.outcome)
			}
		}
	}
	if res[5].Reason != store.ReasonInvalid || !strings.Contains(res[5].Error, "data.reason") {
		t.Errorf("line 6 = %+v, want quarantined for data.reason", res[5])
	}
	if got := s.Sims.Stripe.Stats().RefundedAmount; got != 500+4500 {
		t.Errorf("refunded at stripe = %d, want 5000", got)
	}
}

// TestRefundBeforeItsOrder: a refund published before its order waits for
// the order's payment (nothing recorded meanwhile, Stripe not called), then
// refunds once with one receipt, instead of ending order_not_paid.
func TestRefundBeforeItsOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{}) // the default wait: days
	ctx := context.Background()
	if r := accept(t, s, refundMsg("evt_early_r", 62, 700)); r.Status != intake.StatusStarted {
		t.Fatalf("refund = %+v", r)
	}
	time.Sleep(3 * time.Second) // the refund asks a few times and waits
	if st, err := s.Store.Status(ctx, "order-refund", "evt_early_r"); err != nil || st.Processed != nil {
		t.Fatalf("refund recorded before its order: %+v, %v", st.Processed, err)
	}
	if n := s.Sims.Stripe.Stats().Refunds; n != 0 {
		t.Fatalf("stripe refunds before the order: %d", n)
	}
	if r := accept(t, s, order("evt_early_o", 62, "pm_card_visa")); r.Status != intake.StatusStarted {
		t.Fatalf("order = %+v", r)
	}
	if st := wait(t, s, "evt_early_o"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("order outcome = %+v", st)
	}
	st := waitRefund(t, s, "evt_early_r")
	if st.Outcome != workflows.OutcomeRefunded || st.Refund == nil || st.Refund.RefundID == "" {
		t.Fatalf("refund outcome = %+v, want refunded", st)
	}
	stripe, mail := s.Sims.Stripe.Stats(), s.Sims.SendGrid.Stats()
	if stripe.RefundsByMessage["evt_early_r"] != 1 || stripe.RefundedAmount != 700 {
		t.Errorf("stripe refunds %v, amount %d; want one of 700", stripe.RefundsByMessage, stripe.RefundedAmount)
	}
	if n := mail.DeliveriesByKey["refundemail:evt_early_r"]; n != 1 {
		t.Errorf("refund receipts = %d, want 1", n)
	}
}

// TestPendingRefund runs a refund Stripe answers pending through the real
// stack: the workflow records it pending, sends no receipt and waits; once
// Stripe moves it, the workflow's next check records it succeeded and the
// receipt goes out, once.
func TestPendingRefund(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	ctx := context.Background()
	accept(t, s, order("evt_rp_o", 71, "pm_card_pendingRefund"))
	if st := wait(t, s, "evt_rp_o"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("order outcome = %+v", st)
	}
	accept(t, s, refundMsg("evt_rp_1", 71, 700))
	var rf store.Refund
	testenv.Eventually(t, 30*time.Second, "the refund recorded pending", func() bool {
		rf, _ = s.Store.RefundOf(ctx, message.ConsumerRefundRequested, "evt_rp_1")
		return rf.State == store.RefundPending
	})
	time.Sleep(2 * time.Second) // a check or two finds it still pending
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["refundemail:evt_rp_1"]; n != 0 {
		t.Fatalf("%d receipts for a refund still pending", n)
	}
	if err := s.Sims.Stripe.SettleRefund(rf.RefundID); err != nil {
		t.Fatal(err)
	}
	st := waitRefund(t, s, "evt_rp_1")
	if st.Outcome != workflows.OutcomeRefunded || st.Refund.RefundID != rf.RefundID {
		t.Fatalf("refund outcome = %+v", st)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["refundemail:evt_rp_1"]; n != 1 {
		t.Errorf("refund receipts = %d, want 1", n)
	}
	ms, err := s.Store.Status(ctx, message.ConsumerRefundRequested, "evt_rp_1")
	if err != nil || ms.Refund.State != store.RefundSucceeded || ms.Processed.Outcome != store.OutcomeRefunded {
		t.Errorf("postgres: refund %+v processed %+v, %v", ms.Refund, ms.Processed, err)
	}
}
