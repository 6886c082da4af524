package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

// waitRefundOutcome waits for a refund workflow run by the worker process.
func (s *procStack) waitRefundOutcome(t *testing.T, messageID string) workflows.RefundStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var st workflows.RefundStatus
	for {
		err := s.client.GetWorkflow(ctx, "order-refund/"+messageID, "").Get(ctx, &st)
		var notFound *serviceerror.NotFound
		if err == nil {
			return st
		}
		if !errors.As(err, &notFound) || ctx.Err() != nil {
			t.Fatalf("workflow of %s: %v", messageID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refundKilledAfterStripe pays order orderID (message orderEvt), then
// sends a refund of amount (message refundEvt) and waits until the worker
// p, started with the refund.after_refund failpoint, is killed there:
// between Stripe's refund and its record.
func (s *procStack) refundKilledAfterStripe(t *testing.T, p *workerproc.Proc, orderEvt, refundEvt string, orderID, amount int64) {
	t.Helper()
	ctx := context.Background()
	if res, err := s.intake.Accept(ctx, order(orderEvt, orderID, "pm_card_visa"), "test"); err != nil || res.Status != intake.StatusStarted {
		t.Fatalf("accept order = %+v, %v", res, err)
	}
	if st := s.waitOutcome(t, orderEvt); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("order outcome = %+v", st)
	}
	if res, err := s.intake.Accept(ctx, refundMsg(refundEvt, orderID, amount), "test"); err != nil || res.Status != intake.StatusStarted {
		t.Fatalf("accept refund = %+v, %v", res, err)
	}
	killedAt(t, p, failpoint.RefundAfterRefund)
}

// checkRefundedOnce waits for the refund of message id and checks it was
// replayed by Stripe's key after the kill: one refund, one receipt.
func (s *procStack) checkRefundedOnce(t *testing.T, id string) {
	t.Helper()
	st := s.waitRefundOutcome(t, id)
	if st.Outcome != workflows.OutcomeRefunded || !st.Refund.Replayed {
		t.Errorf("outcome = %+v (want refunded, replayed by Stripe's key)", st)
	}
	if n := s.sims.Stripe.Stats().RefundsByMessage[id]; n != 1 {
		t.Errorf("refunds = %d, want exactly 1", n)
	}
	if n := s.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+id]; n != 1 {
		t.Errorf("refund receipts = %d, want 1", n)
	}
}

// TestRefundCrashWindow kills the real worker between Stripe's refund and
// its record (refund.after_refund) and restarts it: the retry replays the
// refund under its key, so the customer is refunded once, the amount counts
// once against the payment, and one receipt goes out.
func TestRefundCrashWindow(t *testing.T) {
	s := newProcStack(t)
	first := s.start(t, failpoint.EnvVar+"="+failpoint.RefundAfterRefund)
	ctx := context.Background()
	const id = "evt_crash_refund"
	s.refundKilledAfterStripe(t, first, "evt_crash_o", id, 78, 700)

	s.start(t) // the restarted worker, no failpoint
	s.checkRefundedOnce(t, id)
	if refunded, _, err := s.store.RefundedAmount(ctx, 78); err != nil || refunded != 700 {
		t.Errorf("refunded_amount = %d, %v; want 700", refunded, err)
	}
	ms, err := s.store.Status(ctx, message.ConsumerRefundRequested, id)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Processed == nil || ms.Processed.Outcome != store.OutcomeRefunded || ms.Refund == nil || ms.Refund.State != store.RefundSucceeded {
		t.Errorf("postgres: processed = %+v, refund = %+v", ms.Processed, ms.Refund)
	}
}

// TestRefundReceiptCrashWindows kills the real worker in the windows of a
// refund receipt that the refund's local attempt claims in its record and
// sends, and restarts it. After the record, before the send
// (refund.after_record): the restart finds the refund recorded, gets no
// claim, and SendRefundReceipt claims the receipt through the ledger and
// sends it once, or, under at-most-once, finds it in_flight and settles it
// unknown without a send (that policy's promise: lost, never doubled).
// After SendGrid accepted, before the record (email.after_send): the
// documented receipt window, one more under at-least-once, none under
// at-most-once. The order is paid by a worker without the failpoint first,
// so the kill is the refund's.
func TestRefundReceiptCrashWindows(t *testing.T) {
	cases := []struct {
		point      string
		policy     string
		wantEmails int
		want       workflows.Outcome
	}{
		{failpoint.RefundAfterRecord, "at-least-once", 1, workflows.OutcomeRefunded},
		{failpoint.RefundAfterRecord, "at-most-once", 0, workflows.OutcomeReceiptUnknown},
		{failpoint.EmailAfterSend, "at-least-once", 2, workflows.OutcomeRefunded},
		{failpoint.EmailAfterSend, "at-most-once", 1, workflows.OutcomeReceiptUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.point+"/"+tc.policy, func(t *testing.T) {
			t.Parallel() // mostly waiting for timeouts; each case has its own stack
			s := newProcStack(t, "EMAIL_POLICY="+tc.policy)
			ctx := context.Background()
			slug := strings.NewReplacer(".", "_", "-", "_").Replace(tc.point + "_" + tc.policy)
			orderEvt, id := "evt_o_"+slug, "evt_r_"+slug
			payer := s.start(t)
			if res, err := s.intake.Accept(ctx, order(orderEvt, 79, "pm_card_visa"), "test"); err != nil || res.Status != intake.StatusStarted {
				t.Fatalf("accept order = %+v, %v", res, err)
			}
			if st := s.waitOutcome(t, orderEvt); st.Outcome != workflows.OutcomeCompleted {
				t.Fatalf("order outcome = %+v", st)
			}
			payer.Stop(10 * time.Second)

			first := s.start(t, failpoint.EnvVar+"="+tc.point)
			if res, err := s.intake.Accept(ctx, refundMsg(id, 79, 600), "test"); err != nil || res.Status != intake.StatusStarted {
				t.Fatalf("accept refund = %+v, %v", res, err)
			}
			killedAt(t, first, tc.point)

			s.start(t) // the restarted worker, no failpoint
			st := s.waitRefundOutcome(t, id)
			if st.Outcome != tc.want {
				t.Errorf("outcome = %q, want %q (%+v)", st.Outcome, tc.want, st)
			}
			if n := s.sims.Stripe.Stats().RefundsByMessage[id]; n != 1 {
				t.Errorf("refunds = %d, want exactly 1", n)
			}
			if n := s.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+id]; n != tc.wantEmails {
				t.Errorf("refund receipts = %d, want %d", n, tc.wantEmails)
			}
			// At-least-once claims the row again after the kill (claim 2),
			// fencing the dead attempt; at-most-once settles the in_flight
			// row of the dead attempt's claim as unknown.
			e, err := s.store.Effect(ctx, "refundemail:"+id)
			wantState, wantClaim := store.StateSucceeded, int32(2)
			if tc.policy == "at-most-once" {
				wantState, wantClaim = store.StateUnknown, 1
			}
			if err != nil || e.State != wantState || e.Claim != wantClaim {
				t.Errorf("refund receipt's ledger row = %+v, %v; want %s under claim %d", e, err, wantState, wantClaim)
			}
			if refunded, _, err := s.store.RefundedAmount(ctx, 79); err != nil || refunded != 600 {
				t.Errorf("refunded_amount = %d, %v; want 600", refunded, err)
			}
		})
	}
}
