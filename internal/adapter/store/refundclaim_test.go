package store_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// roundTrips counts what a pool sends Postgres and waits for: each
// statement (begin and commit included) and each pipeline of statements.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (*roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (*roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestClaimRefundRoundTrips: a refund's claim reads in one pipeline and
// reserves, inserts and claims in one statement, so a first claim takes
// four round trips (begin, reads, reserve, commit) where it took nine, and
// still decides as before: the amount reserved, the ledger row claimed 1,
// a retry's claim 2, a refund past what remains refused and recorded, and
// that refusal replayed from the reads alone.
func TestClaimRefundRoundTrips(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	pc.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool)

	c, err := s.ClaimPayment(ctx, claim("rtpay", 3100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "rtpay", OrderID: 3100, Key: "payment:rtpay", Claim: c.Claim, PaymentIntentID: "pi_rt", Amount: 1999, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	refund := func(id string, amount int64) store.RefundClaim {
		return store.RefundClaim{Consumer: "order-refund", MessageID: id, OrderID: 3100, Amount: amount, Reason: "requested_by_customer", Key: "refund:" + id, RequestHash: "h-" + id}
	}
	claimIn := func(rc store.RefundClaim, trips int64) store.RefundClaimResult {
		t.Helper()
		before := rt.n.Load()
		res, err := s.ClaimRefund(ctx, rc)
		if err != nil {
			t.Fatalf("claim %s: %v", rc.MessageID, err)
		}
		if n := rt.n.Load() - before; n != trips {
			t.Errorf("claim %s (%s) took %d round trips, want %d", rc.MessageID, res.Decision, n, trips)
		}
		return res
	}

	first := claimIn(refund("rt1", 500), 4)
	if first.Decision != store.RefundOwned || first.Claim != 1 || first.Refund.Amount != 500 || first.Refund.Currency != "usd" ||
		first.Refund.PaymentIntentID != "pi_rt" || first.Refund.State != store.RefundClaimed || first.Paid != 1999 || first.Refunded != 0 {
		t.Errorf("first claim = %+v, want owned under claim 1, 500 usd of pi_rt reserved", first)
	}
	again := claimIn(refund("rt1", 500), 4)
	if again.Decision != store.RefundOwned || again.Claim != 2 || again.Refunded != 500 {
		t.Errorf("the retry's claim = %+v, want owned under claim 2 with 500 reserved", again)
	}
	over := claimIn(refund("rt2", 1600), 5) // 500 + 1600 > 1999: refused, and recorded
	if over.Decision != store.RefundExceedsPayment || over.Refunded != 500 {
		t.Errorf("a refund past what remains = %+v, want refund_exceeds_payment", over)
	}
	if res := claimIn(refund("rt2", 1600), 3); res.Decision != store.RefundExceedsPayment {
		t.Errorf("the refused refund's copy = %+v, want its refusal replayed", res)
	}
	var refunded int64
	var refunds, ledger int
	if err := pool.QueryRow(ctx, `SELECT refunded_amount, (SELECT count(*) FROM refunds), (SELECT count(*) FROM effects WHERE kind = 'refund')
		FROM payments WHERE order_id = 3100`).Scan(&refunded, &refunds, &ledger); err != nil {
		t.Fatal(err)
	}
	if refunded != 500 || refunds != 1 || ledger != 1 {
		t.Errorf("after the claims: refunded %d, %d refunds rows, %d refund ledger rows; want 500, 1, 1", refunded, refunds, ledger)
	}
}
