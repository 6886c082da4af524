package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestReceiptEventsOfASharedMessageID: an order.placed and an
// order.refund_requested may share a message ID (docs/refunds.md, "The
// receipt"); each receipt recorded sent announces its own receipt.sent
// event, the refund receipt's under an ID of its own (migration 00020).
func TestReceiptEventsOfASharedMessageID(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	const id = "evt_shared"

	// The order's payment and its receipt, held by the payment's record.
	c, err := s.ClaimPayment(ctx, claim(id, 42))
	if err != nil || c.Outcome != store.ClaimOwned {
		t.Fatalf("claim payment = %+v, %v", c, err)
	}
	_, mailClaim, err := s.RecordPaidClaimingReceipt(ctx, store.PaymentSuccess{
		Consumer: "order-placed", MessageID: id, OrderID: 42, Key: "payment:" + id, Claim: c.Claim,
		PaymentIntentID: "pi_1", Amount: 1999, Currency: "usd",
		Receipt: &store.EmailClaim{Key: "email:" + id, RequestHash: "m1", Policy: store.AtLeastOnce},
	})
	if err != nil || mailClaim == 0 {
		t.Fatalf("record payment = %d, %v", mailClaim, err)
	}
	if _, err := s.RecordEmailSent(ctx, "email:"+id, mailClaim, 42, "x_order"); err != nil {
		t.Fatalf("record order receipt: %v", err)
	}

	// A refund message under the other consumer with the same ID.
	rc, err := s.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: id, OrderID: 42, Amount: 500,
		Reason: "requested_by_customer", Key: "refund:" + id, RequestHash: "r1"})
	if err != nil || rc.Decision != store.RefundOwned {
		t.Fatalf("claim refund = %+v, %v", rc, err)
	}
	_, rmail, err := s.RecordRefundClaimingReceipt(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: id, OrderID: 42,
		Key: "refund:" + id, Claim: rc.Claim, RefundID: "re_1", Status: "succeeded",
		Receipt: &store.EmailClaim{Key: "refundemail:" + id, RequestHash: "m2", Policy: store.AtLeastOnce}})
	if err != nil || rmail == 0 {
		t.Fatalf("record refund = %d, %v", rmail, err)
	}
	if _, err := s.RecordEmailSent(ctx, "refundemail:"+id, rmail, 0, "x_refund"); err != nil {
		t.Fatalf("record refund receipt: %v", err)
	}

	rows, err := s.Pool().Query(ctx, `SELECT event_id || ' ' || (payload->>'idempotency_key') FROM outbox WHERE topic = 'receipt.sent' ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"receipt.sent:evt_shared email:evt_shared", "receipt.sent:refund:evt_shared refundemail:evt_shared"}
	if !slices.Equal(events, want) {
		t.Errorf("receipt.sent events = %q, want %q", events, want)
	}
}
