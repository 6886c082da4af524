package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// paidRefund records a payment of order and claims the refund msg of 500
// against it.
func paidRefund(t *testing.T, s *store.Store, pay, msg string, order int64) store.RefundClaimResult {
	t.Helper()
	ctx := context.Background()
	c, err := s.ClaimPayment(ctx, claim(pay, order))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: pay, OrderID: order, Key: "payment:" + pay, Claim: c.Claim, PaymentIntentID: "pi_" + pay, Amount: 1999, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	rc, err := s.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: msg, OrderID: order, Amount: 500, Reason: "requested_by_customer", Key: "refund:" + msg, RequestHash: "h-" + msg})
	if err != nil || rc.Decision != store.RefundOwned {
		t.Fatalf("claim: %+v %v", rc, err)
	}
	return rc
}

// TestRefundUpdateDuringItsRecord: a charge.refund.updated (failed) that
// arrives while the activity's record of the refund (succeeded) has run but
// not committed waits for it, and is then applied to the recorded row: the
// refund fails and its amount is free again. (It was lost: the update's
// statement took its snapshot before the record's commit, matched nothing
// and reported no error, so the webhook answered 200.)
func TestRefundUpdateDuringItsRecord(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	rc := paidRefund(t, s, "rdpay", "rd1", 4100)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if n, err := store.RecordRefundInTx(ctx, tx, store.RefundSuccess{Consumer: "order-refund", MessageID: "rd1", OrderID: 4100, Key: "refund:rd1", Claim: rc.Claim, RefundID: "re_rd1", Status: "succeeded"}); err != nil || n != 1 {
		t.Fatalf("record: %d %v", n, err)
	}
	type out struct {
		r   store.RefundUpdateResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := s.UpdateRefund(ctx, store.RefundUpdate{RefundID: "re_rd1", Key: "refund:rd1", Status: "failed", FailureReason: "expired_or_canceled_card", Source: "test"})
		done <- out{r, err}
	}()
	// Commit once the update waits on the record's row lock.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the update never waited on the record's lock")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	row, err := s.RefundOf(ctx, "order-refund", "rd1")
	if err != nil {
		t.Fatal(err)
	}
	refunded, _, err := s.RefundedAmount(ctx, 4100)
	if err != nil {
		t.Fatal(err)
	}
	if o.err != nil || !o.r.Reversed() || row.State != store.RefundFailed || refunded != 0 {
		t.Fatalf("update during the record = %+v, %v; row %s, refunded %d; want the refund failed and 0 reserved", o.r, o.err, row.State, refunded)
	}
}
