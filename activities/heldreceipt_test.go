package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
)

// withReceipt is in as the workflow's local charge gets it: with the
// receipt's address and the local attempt's time for it.
func withReceipt(in activities.ChargeInput) activities.ChargeInput {
	in.ReceiptTo, in.ReceiptBudget = "ada@example.com", 10*time.Second
	return in
}

// TestHeldReceiptIsSentByOneAttemptOnly: the receipt claimed by the
// payment's record is sent by the attempt that made the record and by no
// other. A charge attempt run again (a local attempt whose result was lost
// with the worker) finds the payment recorded and sends nothing; the
// workflow's SendReceipt then finds the receipt recorded.
func TestHeldReceiptIsSentByOneAttemptOnly(t *testing.T) {
	f := newFixture(t, "")
	in := withReceipt(charge("evt_held_again", 96, "pm_card_visa"))
	first := chargeLocally(t, f, in)
	if first.Receipt == nil || first.Receipt.Outcome != activities.ReceiptSent {
		t.Fatalf("charge = %+v; want paid with its receipt sent", first)
	}
	again := chargeLocally(t, f, in)
	if again.Outcome != activities.PaymentPaid || !again.Recorded || again.Receipt != nil {
		t.Fatalf("charge run again = %+v; want the recorded payment and no receipt", again)
	}
	rec := activities.ReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		To: in.ReceiptTo, PaymentIntentID: again.PaymentIntentID}
	r, err := run(t, f, f.acts.SendReceipt, rec)
	if err != nil || r.Outcome != activities.ReceiptSent || !r.Recorded {
		t.Fatalf("receipt = %+v, %v; want the recorded send", r, err)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:"+in.MessageID]; n != 1 {
		t.Errorf("receipts at sendgrid = %d, want 1", n)
	}
}

// TestChargeSendsNoReceiptWithoutItsTime: the regular activity, and a local
// attempt with less time left than the receipt's budget, record the payment
// without claiming the receipt, and send none: the workflow's SendReceipt
// then has the receipt's whole attempt for it.
func TestChargeSendsNoReceiptWithoutItsTime(t *testing.T) {
	f := newFixture(t, "")
	regular := withReceipt(charge("evt_held_regular", 102, "pm_card_visa"))
	if r, err := run(t, f, f.acts.ChargeOrder, regular); err != nil || r.Outcome != activities.PaymentPaid || r.Receipt != nil {
		t.Fatalf("regular charge = %+v, %v; want paid, no receipt", r, err)
	}
	late := withReceipt(charge("evt_held_late", 103, "pm_card_visa"))
	late.ReceiptBudget = 24 * time.Hour // more than the attempt has
	if r := chargeLocally(t, f, late); r.Outcome != activities.PaymentPaid || r.Receipt != nil {
		t.Fatalf("local charge without the receipt's time = %+v; want paid, no receipt", r)
	}
	for _, id := range []string{regular.MessageID, late.MessageID} {
		if _, err := f.db.Effect(context.Background(), "email:"+id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: receipt's ledger row: %v; want none (not claimed with the charge)", id, err)
		}
		if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:"+id]; n != 0 {
			t.Errorf("%s: receipts = %d, want 0", id, n)
		}
	}
}
