package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestProcessingPaymentWaitsForStripe: a PaymentIntent that Stripe answers
// with processing is recorded as such and sends no receipt; the workflow's
// poll timer retrieves it until Stripe settles it, then sends the receipt
// for the one that succeeded and none for the one that failed.
func TestProcessingPaymentWaitsForStripe(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{Workflows: workflows.Config{PaymentProcessingPoll: 500 * time.Millisecond, PaymentProcessingMaxWait: time.Minute}})
	accept(t, s, order("evt_proc_ok", 80, "pm_card_processing"))
	accept(t, s, order("evt_proc_bad", 81, "pm_card_processingDeclined"))
	ctx := context.Background()
	for _, id := range []string{"evt_proc_ok", "evt_proc_bad"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := s.Store.PaymentOf(ctx, message.ConsumerOrderPlaced, id)
			if err == nil && p.State == store.PaymentProcessing {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: payment = %+v, %v; want processing", id, p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(1500 * time.Millisecond) // a few polls while Stripe is still processing
	if n := s.Sims.SendGrid.Stats().Deliveries; n != 0 {
		t.Fatalf("receipts while processing = %d", n)
	}
	for id, succeed := range map[string]bool{"evt_proc_ok": true, "evt_proc_bad": false} {
		p, _ := s.Store.PaymentOf(ctx, message.ConsumerOrderPlaced, id)
		if err := s.Sims.Stripe.SettleProcessing(p.PaymentIntentID, succeed); err != nil {
			t.Fatal(err)
		}
	}
	if st := wait(t, s, "evt_proc_ok"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("evt_proc_ok = %+v", st)
	}
	expectOnce(t, s, "evt_proc_ok")
	if st := wait(t, s, "evt_proc_bad"); st.Outcome != workflows.OutcomePaymentFailed || st.Receipt != nil {
		t.Fatalf("evt_proc_bad = %+v", st)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["email:evt_proc_bad"]; n != 0 {
		t.Fatalf("receipts for a failed payment = %d", n)
	}
	if n := s.Sims.Stripe.Stats().RequestsByOperation["search"]; n != 0 {
		t.Fatalf("search requests = %d", n)
	}
}
