package activities_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
)

// intakeClaimed records in's message in the inbox with its payment
// claimed, as the intake does, and returns in carrying that claim and the
// receipt's address, as the workflow's local attempt gets it.
func intakeClaimed(t *testing.T, f *fixture, in activities.ChargeInput) activities.ChargeInput {
	t.Helper()
	c, err := activities.IntakeClaim(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Claim = recordClaimed(t, f, in.Consumer, in.MessageID, store.IntakeClaim{Payment: &c})
	return withReceipt(in)
}

// recordClaimed records message id of consumer in the inbox with the
// intake's claim c, as the intake does, and returns the claim as the
// workflow's input carries it; the insert must have claimed.
func recordClaimed(t *testing.T, f *fixture, consumer, id string, c store.IntakeClaim) *message.Claim {
	t.Helper()
	r, err := f.db.InsertInbox(context.Background(), store.InboxEntry{Consumer: consumer, MessageID: id,
		Payload: []byte(`{"id":"` + id + `"}`), PayloadHash: "h-" + id, Source: "test", Payment: c.Payment, Refund: c.Refund})
	if err != nil || r.Claim != 1 {
		t.Fatalf("inbox insert of %s = %+v, %v; want its effect claimed", id, r, err)
	}
	return &message.Claim{Token: r.Claim, At: r.ClaimedAt, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency}
}

// chargeLocally runs ChargeOrderLocally, failing on its error.
func chargeLocally(t *testing.T, f *fixture, in activities.ChargeInput) activities.ChargeResult {
	t.Helper()
	lc, err := run(t, f, f.acts.ChargeOrderLocally, in)
	if err != nil || lc.Err != nil {
		t.Fatalf("local charge = %+v, %v", lc, err)
	}
	return lc.Result
}

// TestPaidMessageClaimedAtIntake counts the Postgres transactions of a paid
// message whose payment the intake claimed: the inbox insert, which claims
// the payment; the payment's record, which claims the receipt and marks
// the inbox row dispatched; the receipt's record. Three for a message
// alone, about 2.66 when the intake's inserts share transactions as the
// bench's do. Any transaction more fails here.
func TestPaidMessageClaimedAtIntake(t *testing.T) {
	f, counter := countedFixture(t)
	counter.take()
	in := intakeClaimed(t, f, charge("evt_tx_intake", 98, "pm_card_visa"))
	if txns := counter.take(); len(txns) != 1 || !strings.HasPrefix(txns[0], "batch(") {
		t.Errorf("inbox insert with the payment's claim: %d transactions, want 1 (a batch):\n  %s", len(txns), strings.Join(txns, "\n  "))
	}
	chargeAndReceipt(t, f, counter, in, 2, "the record with the receipt's claim, the receipt's record")
	st, err := f.db.Status(context.Background(), in.Consumer, in.MessageID)
	if err != nil || st.Inbox == nil || st.Inbox.State != store.InboxDispatched || st.Inbox.WorkflowID != "order-placed/"+in.MessageID {
		t.Errorf("inbox = %+v, %v; want dispatched by order-placed/%s", st.Inbox, err, in.MessageID)
	}
	if st.Processed == nil || st.Processed.Outcome != store.OutcomePaid || st.Order == nil || st.Order.ReceiptStatus != "sent" {
		t.Errorf("processed %+v, order %+v; want paid, receipt sent", st.Processed, st.Order)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
}

// TestIntakeClaimRunAgain: a local attempt run again with the intake's
// claim (one that outlived its first workflow task on a worker that then
// died, its result lost) sends Stripe the same requests under the same keys,
// which replay: one charge. Its record finds the outcome recorded, so it
// claims no receipt and sends none; the workflow's SendReceipt finds the
// receipt recorded.
func TestIntakeClaimRunAgain(t *testing.T) {
	f := newFixture(t, "")
	in := intakeClaimed(t, f, charge("evt_intake_again", 99, "pm_card_visa"))
	first := chargeLocally(t, f, in)
	again := chargeLocally(t, f, in)
	if again.Outcome != activities.PaymentPaid || again.PaymentIntentID != first.PaymentIntentID || again.Receipt != nil {
		t.Fatalf("run again = %+v; want paid with %s and no receipt", again, first.PaymentIntentID)
	}
	rec := activities.ReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		To: in.ReceiptTo, PaymentIntentID: again.PaymentIntentID}
	if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || !r.Recorded || r.Outcome != activities.ReceiptSent {
		t.Fatalf("receipt = %+v, %v; want the recorded send", r, err)
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:"+in.MessageID]; n != 1 {
		t.Errorf("receipts = %d, want 1", n)
	}
	if e, err := f.db.Effect(context.Background(), "payment:"+in.MessageID); err != nil || e.Claim != 1 || e.State != store.StateSucceeded {
		t.Errorf("payment's ledger row = %+v, %v; want succeeded under the intake's claim 1", e, err)
	}
}

// TestIntakeClaimOnlyLocallyInsideTheWindow: the regular activity, and a
// local attempt past the key window, claim through the ledger, counting the
// token up past the intake's (a local attempt past the window then looks
// the payment up first).
func TestIntakeClaimOnlyLocallyInsideTheWindow(t *testing.T) {
	f := newFixture(t, "")
	in := intakeClaimed(t, f, charge("evt_intake_regular", 100, "pm_card_visa"))
	if r, err := run(t, f, f.acts.ChargeOrder, in); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("regular charge = %+v, %v", r, err)
	}
	if e, err := f.db.Effect(context.Background(), "payment:"+in.MessageID); err != nil || e.Claim != 2 {
		t.Errorf("regular activity: payment's ledger row = %+v, %v; want claim 2", e, err)
	}

	late := intakeClaimed(t, f, charge("evt_intake_late", 101, "pm_card_visa"))
	f.acts.Now = func() time.Time { return late.Claim.At.Add(24 * time.Hour) }
	if r := chargeLocally(t, f, late); r.Outcome != activities.PaymentPaid {
		t.Fatalf("local charge past the window = %+v", r)
	}
	if e, err := f.db.Effect(context.Background(), "payment:"+late.MessageID); err != nil || e.Claim != 2 {
		t.Errorf("past the window: payment's ledger row = %+v, %v; want claim 2", e, err)
	}
	if st := f.sims.Stripe.Stats(); st.RequestsByOperation["list"] == 0 {
		t.Errorf("stripe requests %v: the attempt past the window did not look the payment up", st.RequestsByOperation)
	}
}

// TestRecordMarksARowTheClaimSkipped: a charge's claim skips an inbox row
// another transaction holds (a copy's insert counting itself, a
// Dispatcher), rather than waiting for it; the payment's record, once the
// lock is gone, marks the row dispatched, so it does not stay pending until
// a Dispatcher pass.
func TestRecordMarksARowTheClaimSkipped(t *testing.T) {
	f := newFixture(t, "")
	ctx := context.Background()
	in := charge("evt_mark_skipped", 102, "pm_card_visa")
	if _, err := f.db.InsertInbox(ctx, store.InboxEntry{Consumer: in.Consumer, MessageID: in.MessageID,
		Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}); err != nil {
		t.Fatal(err)
	}
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE inbox SET duplicates = duplicates + 1 WHERE message_id = $1`, in.MessageID); err != nil {
		t.Fatal(err)
	}
	// Stripe holds the create long enough to let the lock go after the claim.
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: in.MessageID}, Kind: stripesim.FaultDelay, Delay: 500 * time.Millisecond, Times: 1})
	done := make(chan activities.ChargeResult, 1)
	go func() {
		r, err := f.acts.ChargeOrder(ctx, in)
		if err != nil {
			t.Errorf("charge: %v", err)
		}
		done <- r
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := f.db.Effect(ctx, "payment:"+in.MessageID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the payment was not claimed in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge = %+v; want paid", r)
	}
	st, err := f.db.Status(ctx, in.Consumer, in.MessageID)
	if err != nil || st.Inbox == nil || st.Inbox.State != store.InboxDispatched || st.Inbox.WorkflowID != "order-placed/"+in.MessageID {
		t.Fatalf("inbox = %+v, %v; want dispatched by order-placed/%s, marked by the payment's record", st.Inbox, err, in.MessageID)
	}
}
