package e2e

import (
	"context"
	"errors"
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
