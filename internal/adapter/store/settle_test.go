package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestProcessingSettlesOnceAndFinalNeverMoves: create, record, confirm
// leaves a payment processing; the settlement from Stripe moves it to
// succeeded once, a repeat is a no-op, and a contradicting settlement
// (failed after succeeded) is refused and changes nothing.
func TestProcessingSettlesOnceAndFinalNeverMoves(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	c, err := s.ClaimPayment(ctx, claim("evt_s", 5))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPaymentIntentID(ctx, "order-placed", "evt_s", "payment:evt_s", c.Claim, "pi_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPaymentIntentID(ctx, "order-placed", "evt_s", "payment:evt_s", c.Claim, "pi_2"); !errors.Is(err, store.ErrMismatch) {
		t.Fatalf("a second payment intent: %v, want ErrMismatch", err)
	}
	if err := s.RecordPaymentIntentID(ctx, "order-placed", "evt_s", "payment:evt_s", c.Claim+1, "pi_1"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale claim: %v, want ErrFenced", err)
	}
	if _, err := s.RecordPaymentProcessing(ctx, store.PaymentOpen{Consumer: "order-placed", MessageID: "evt_s", Key: "payment:evt_s", Claim: c.Claim, PaymentIntentID: "pi_1", StripeStatus: "processing"}); err != nil {
		t.Fatal(err)
	}
	p, _ := s.PaymentOf(ctx, "order-placed", "evt_s")
	if p.State != store.PaymentProcessing || p.PaymentIntentID != "pi_1" {
		t.Fatalf("payment = %+v", p)
	}
	if again, err := s.ClaimPayment(ctx, claim("evt_s", 5)); err != nil || again.Outcome != store.ClaimDone {
		t.Fatalf("claim of a processing payment = %+v, %v; want done (no new attempt)", again, err)
	}
	paid := store.Settlement{Payment: p, State: store.PaymentSucceeded, PaymentIntentID: "pi_1", ChargeID: "ch_1", StripeStatus: "succeeded"}
	if already, err := s.SettlePayment(ctx, paid); err != nil || already {
		t.Fatalf("settle = %v, %v", already, err)
	}
	if already, err := s.SettlePayment(ctx, paid); err != nil || !already {
		t.Fatalf("settle again = %v, %v; want already", already, err)
	}
	failed := store.Settlement{Payment: p, State: store.PaymentFailed, PaymentIntentID: "pi_1", FailureCode: "card_declined"}
	if _, err := s.SettlePayment(ctx, failed); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("failed after succeeded: %v, want refused", err)
	}
	st, err := s.Status(ctx, "order-placed", "evt_s")
	if err != nil || st.Payment.State != store.PaymentSucceeded || st.Order.Status != store.OrderPaid || st.Processed.Outcome != store.OutcomePaid {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if open, err := s.OpenPayments(ctx, store.PaymentProcessing, 10); err != nil || len(open) != 0 {
		t.Fatalf("open processing = %+v, %v", open, err)
	}
}
