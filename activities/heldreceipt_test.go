package activities_test

import (
	"context"
	"errors"
	"strings"
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

// withRefundReceipt is in as the workflow's local refund gets it: with the
// local attempt's time for the refund receipt.
func withRefundReceipt(in activities.RefundInput) activities.RefundInput {
	in.ReceiptBudget = 10 * time.Second
	return in
}

// refundLocally runs RefundOrderLocally and fails the test on an error.
func refundLocally(t *testing.T, f *fixture, in activities.RefundInput) activities.RefundResult {
	t.Helper()
	lr, err := run(t, f, f.acts.RefundOrderLocally, in)
	if err != nil || lr.Err != nil {
		t.Fatalf("local refund = %+v, %v", lr, err)
	}
	return lr.Result
}

// TestHeldRefundReceiptIsSentByOneAttemptOnly: the refund receipt claimed
// by the refund's record (claim 1) is sent by the attempt that made the
// record and by no other. A local refund run again finds the refund
// recorded and sends nothing; SendRefundReceipt without Sent then finds the
// receipt recorded, and with Sent returns it as it is.
func TestHeldRefundReceiptIsSentByOneAttemptOnly(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_held_rp", 140)
	in := withRefundReceipt(refundOf("evt_held_rr", 140, 400))
	first := refundLocally(t, f, in)
	if first.Outcome != activities.RefundRefunded || first.Receipt == nil || first.Receipt.Outcome != activities.ReceiptSent {
		t.Fatalf("refund = %+v; want refunded with its receipt sent", first)
	}
	e, err := f.db.Effect(context.Background(), "refundemail:"+in.MessageID)
	if err != nil || e.State != store.StateSucceeded || e.Claim != 1 || e.ProviderRef != first.Receipt.ProviderMessageID {
		t.Errorf("refund receipt's ledger row = %+v, %v; want succeeded under claim 1 with %s", e, err, first.Receipt.ProviderMessageID)
	}
	again := refundLocally(t, f, in)
	if again.Outcome != activities.RefundRefunded || !again.Recorded || again.Receipt != nil {
		t.Fatalf("refund run again = %+v; want the recorded refund and no receipt", again)
	}
	rin := activities.RefundReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: "usd", RefundID: again.RefundID}
	if r, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || r.Outcome != activities.ReceiptSent || !r.Recorded || r.ProviderMessageID != first.Receipt.ProviderMessageID {
		t.Fatalf("refund receipt = %+v, %v; want the recorded send", r, err)
	}
	rin.Sent = first.Receipt
	if r, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || r != *first.Receipt {
		t.Fatalf("refund receipt with Sent = %+v, %v; want %+v as it is", r, err, *first.Receipt)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+in.MessageID]; n != 1 {
		t.Errorf("refund receipts at sendgrid = %d, want 1", n)
	}
}

// TestRefundSendsNoReceiptWithoutItsTime: the regular activity, and a local
// attempt with less time left than the receipt's budget, record the refund
// without claiming its receipt, and send none.
func TestRefundSendsNoReceiptWithoutItsTime(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_held_np", 141)
	regular := withRefundReceipt(refundOf("evt_held_nr", 141, 100))
	if r, err := run(t, f, f.acts.RefundOrder, regular); err != nil || r.Outcome != activities.RefundRefunded || r.Receipt != nil {
		t.Fatalf("regular refund = %+v, %v; want refunded, no receipt", r, err)
	}
	late := withRefundReceipt(refundOf("evt_held_nl", 141, 100))
	late.ReceiptBudget = 24 * time.Hour // more than the attempt has
	if r := refundLocally(t, f, late); r.Outcome != activities.RefundRefunded || r.Receipt != nil {
		t.Fatalf("local refund without the receipt's time = %+v; want refunded, no receipt", r)
	}
	for _, id := range []string{regular.MessageID, late.MessageID} {
		if _, err := f.db.Effect(context.Background(), "refundemail:"+id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: refund receipt's ledger row: %v; want none (not claimed with the refund)", id, err)
		}
		if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+id]; n != 0 {
			t.Errorf("%s: refund receipts = %d, want 0", id, n)
		}
	}
}

// TestRefundWithItsAddressPrunedHoldsNoReceipt: once the inbox row of the
// order's message is pruned, the refund's claim finds no address, so the
// local refund claims no receipt and sends none; SendRefundReceipt then
// records the receipt failed, with nothing sent.
func TestRefundWithItsAddressPrunedHoldsNoReceipt(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_held_pp", 142)
	if _, err := f.db.Pool().Exec(context.Background(), `DELETE FROM inbox WHERE consumer = 'order-placed' AND message_id = 'evt_held_pp'`); err != nil {
		t.Fatal(err)
	}
	in := withRefundReceipt(refundOf("evt_held_pr", 142, 100))
	r := refundLocally(t, f, in)
	if r.Outcome != activities.RefundRefunded || r.Receipt != nil {
		t.Fatalf("refund = %+v; want refunded, no receipt", r)
	}
	if _, err := f.db.Effect(context.Background(), "refundemail:"+in.MessageID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("refund receipt's ledger row: %v; want none (no address to claim it for)", err)
	}
	rin := activities.RefundReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: "usd", RefundID: r.RefundID}
	m, err := run(t, f, f.acts.SendRefundReceipt, rin)
	if err != nil || m.Outcome != activities.ReceiptFailed || !strings.Contains(m.Error, "no address on record") {
		t.Fatalf("refund receipt = %+v, %v; want failed: no address on record", m, err)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+in.MessageID]; n != 0 {
		t.Errorf("refund receipts = %d, want 0", n)
	}
}
