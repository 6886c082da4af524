package activities_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
)

// intakeRefundClaimed records in's message in the inbox with its refund
// claimed, as the intake does, and returns in carrying that claim and the
// local attempt's time for the receipt, as the workflow's first task gets
// it.
func intakeRefundClaimed(t *testing.T, f *fixture, in activities.RefundInput) activities.RefundInput {
	t.Helper()
	c, err := activities.IntakeRefundClaim(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Claim = recordClaimed(t, f, in.Consumer, in.MessageID, store.IntakeClaim{Refund: &c})
	if in.Claim.PaymentIntentID == "" || in.Claim.Currency != "usd" {
		t.Fatalf("intake's claim = %+v; want the payment's PaymentIntent and usd", in.Claim)
	}
	return withRefundReceipt(in)
}

// TestRefundClaimedAtIntake counts the Postgres transactions of a refund
// the intake claimed: the inbox insert, which reserves the amount and
// claims the refund; the read of the receipt's address; the refund's
// record, which claims the receipt; the receipt's record. Only three of
// them write (a refund the intake did not claim writes four: its claim
// too). Any transaction more fails here, and so does a second refund, a
// second receipt or an amount reserved twice.
func TestRefundClaimedAtIntake(t *testing.T) {
	f, counter := countedFixture(t)
	paid(t, f, "evt_irp_1", 150)
	counter.take()
	in := intakeRefundClaimed(t, f, refundOf("evt_irr_1", 150, 400))
	if txns := counter.take(); len(txns) != 1 || !strings.HasPrefix(txns[0], "batch(") {
		t.Errorf("inbox insert with the refund's claim: %d transactions, want 1 (a batch):\n  %s", len(txns), strings.Join(txns, "\n  "))
	}
	r := refundLocally(t, f, in)
	if r.Outcome != activities.RefundRefunded || r.Currency != "usd" || r.PaymentIntentID != in.Claim.PaymentIntentID ||
		r.Receipt == nil || r.Receipt.Outcome != activities.ReceiptSent {
		t.Fatalf("refund = %+v; want refunded of %s with its receipt sent", r, in.Claim.PaymentIntentID)
	}
	txns := counter.take()
	if len(txns) != 3 || !strings.Contains(txns[0], "customer_email") {
		t.Errorf("refund and receipt: %d transactions, want 3, the first the address's read (then the record with the receipt's claim, the receipt's record):\n  %s",
			len(txns), strings.Join(txns, "\n  "))
	}
	if e, err := f.db.Effect(context.Background(), "refund:"+in.MessageID); err != nil || e.Claim != 1 || e.State != store.StateSucceeded {
		t.Errorf("refund's ledger row = %+v, %v; want succeeded under the intake's claim 1", e, err)
	}
	if n := refunded(t, f, 150); n != 400 {
		t.Errorf("refunded = %d, want 400", n)
	}
	if got := outcomeOf(t, f, in.Consumer, in.MessageID); got != store.OutcomeRefunded {
		t.Errorf("processed = %q, want refunded", got)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage[in.MessageID]; n != 1 {
		t.Errorf("refunds at stripe = %d, want 1", n)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+in.MessageID]; n != 1 {
		t.Errorf("refund receipts at sendgrid = %d, want 1", n)
	}
}

// TestIntakeRefundClaimRunAgain: a local attempt run again with the
// intake's claim (one that outlived its first workflow task on a worker
// that then died, its result lost) sends Stripe the same request under the
// same key, which replays: one refund. Its record finds the outcome
// recorded, so it claims no receipt and sends none; SendRefundReceipt then
// finds the receipt recorded.
func TestIntakeRefundClaimRunAgain(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_irp_again", 151)
	in := intakeRefundClaimed(t, f, refundOf("evt_irr_again", 151, 300))
	first := refundLocally(t, f, in)
	again := refundLocally(t, f, in)
	if again.Outcome != activities.RefundRefunded || again.RefundID != first.RefundID || again.Receipt != nil {
		t.Fatalf("run again = %+v; want refunded as %s and no receipt", again, first.RefundID)
	}
	rin := activities.RefundReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: "usd", RefundID: again.RefundID}
	if r, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || !r.Recorded || r.Outcome != activities.ReceiptSent {
		t.Fatalf("refund receipt = %+v, %v; want the recorded send", r, err)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage[in.MessageID]; n != 1 {
		t.Errorf("refunds at stripe = %d, want 1", n)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:"+in.MessageID]; n != 1 {
		t.Errorf("refund receipts at sendgrid = %d, want 1", n)
	}
	if n := refunded(t, f, 151); n != 300 {
		t.Errorf("refunded = %d, want 300 (reserved once)", n)
	}
}

// TestIntakeRefundClaimOnlyLocallyInsideTheWindow: the regular activity,
// and a local attempt past the key window, claim through the ledger,
// counting the token up past the intake's and reserving nothing more (a
// local attempt past the window then lists the PaymentIntent's refunds
// first). A local attempt run again with the intake's token after such a
// claim is fenced: it records nothing.
func TestIntakeRefundClaimOnlyLocallyInsideTheWindow(t *testing.T) {
	f := newFixture(t, "")
	paid(t, f, "evt_irp_window", 152)
	in := intakeRefundClaimed(t, f, refundOf("evt_irr_regular", 152, 200))
	if r, err := run(t, f, f.acts.RefundOrder, in); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("regular refund = %+v, %v", r, err)
	}
	if e, err := f.db.Effect(context.Background(), "refund:"+in.MessageID); err != nil || e.Claim != 2 || e.State != store.StateSucceeded {
		t.Errorf("regular activity: refund's ledger row = %+v, %v; want succeeded under claim 2", e, err)
	}

	late := intakeRefundClaimed(t, f, refundOf("evt_irr_late", 152, 300))
	f.acts.Now = func() time.Time { return late.Claim.At.Add(24 * time.Hour) }
	if r := refundLocally(t, f, late); r.Outcome != activities.RefundRefunded {
		t.Fatalf("local refund past the window = %+v", r)
	}
	if e, err := f.db.Effect(context.Background(), "refund:"+late.MessageID); err != nil || e.Claim != 2 {
		t.Errorf("past the window: refund's ledger row = %+v, %v; want claim 2", e, err)
	}
	if st := f.sims.Stripe.Stats(); st.RequestsByOperation["list_refunds"] != 1 {
		t.Errorf("stripe requests %v: want the attempt past the window alone to list the refunds", st.RequestsByOperation)
	}
	if n := refunded(t, f, 152); n != 500 {
		t.Errorf("refunded = %d, want 500 (200 and 300, each reserved once)", n)
	}
	for _, id := range []string{in.MessageID, late.MessageID} {
		if n := f.sims.Stripe.Stats().RefundsByMessage[id]; n != 1 {
			t.Errorf("%s: refunds at stripe = %d, want 1", id, n)
		}
	}
}
