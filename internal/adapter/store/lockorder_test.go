package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// lockErrors counts what concurrent ledger calls failed with: deadlocks
// that Postgres broke (SQLSTATE 40P01), and anything else but a fenced
// claim (an expected loser of a race).
type lockErrors struct {
	mu               sync.Mutex
	deadlocks, other int
}

func (l *lockErrors) note(t *testing.T, err error) {
	if err == nil || errors.Is(err, store.ErrFenced) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		l.deadlocks++
		return
	}
	l.other++
	t.Logf("unexpected error: %v", err)
}

// concurrentStore is a Store over a fresh database with a pool wide
// enough for the goroutines of a lock-order test.
func concurrentStore(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := store.Open(context.Background(), storetest.NewDatabase(t), store.PoolConfig{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool), pool
}

// TestClaimRecordAndWebhookShareOneLockOrder runs, for one message after
// another, a claim's slow path (a retry), a record and a webhook's
// settlement together against real Postgres. They take the message's
// ledger row and its payment row in one order, so Postgres never has to
// break a deadlock (SQLSTATE 40P01).
func TestClaimRecordAndWebhookShareOneLockOrder(t *testing.T) {
	ctx := context.Background()
	s, pool := concurrentStore(t)
	const messages, each = 20, 3
	var errs lockErrors
	note := func(err error) { errs.note(t, err) }
	for m := range messages {
		id := fmt.Sprintf("lk%d", m)
		c, err := s.ClaimPayment(ctx, claim(id, int64(1000+m)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordPaymentUnknown(ctx, "order-placed", id, "payment:"+id, c.Claim, "lost"); err != nil {
			t.Fatal(err)
		}
		// Open again for the claims below: an unknown row is final for a
		// claim, so put the ledger row back to claimed as a crashed attempt
		// leaves it.
		if _, err := pool.Exec(ctx, `UPDATE payments SET state = 'claimed' WHERE message_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE effects SET state = 'claimed' WHERE key = $1`, "payment:"+id); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range each {
			wg.Add(3)
			go func() {
				defer wg.Done()
				_, err := s.ClaimPayment(ctx, claim(id, int64(1000+m)))
				note(err)
			}()
			go func() {
				defer wg.Done()
				ev := store.PaymentEvent{
					EventID: fmt.Sprintf("evt_%s_%d", id, i), EventType: "payment_intent.processing",
					PaymentIntentID: "pi_" + id, Key: "payment:" + id, Target: store.PaymentProcessing, Status: "processing",
				}
				_, err := s.RecordProviderEvent(ctx, store.ProviderEvent{
					Consumer: "stripe-events", EventID: ev.EventID, Payload: []byte(`{}`), PayloadHash: "x", Source: "test",
				}, func(ctx context.Context, tx pgx.Tx) error {
					_, err := store.ApplyPaymentEvent(ctx, tx, ev)
					return err
				})
				note(err)
			}()
			go func() {
				defer wg.Done()
				e, err := s.Effect(ctx, "payment:"+id)
				if err != nil {
					note(err)
					return
				}
				note(s.RecordPaymentIntentID(ctx, "order-placed", id, "payment:"+id, e.Claim, "pi_"+id))
			}()
		}
		wg.Wait()
	}
	if errs.deadlocks != 0 || errs.other != 0 {
		t.Fatalf("%d deadlocks (SQLSTATE 40P01) and %d other errors in %d messages × %d rounds of claim, record and webhook", errs.deadlocks, errs.other, messages, each)
	}
}

// TestRefundClaimAndRecordShareOneLockOrder: a refund's claim (a retry
// taking its ledger row again) and its record (which gives the amount back
// to the payment) run together for one refund after another: both take the
// refund's ledger row before the payment, so neither waits for the other
// in a cycle.
func TestRefundClaimAndRecordShareOneLockOrder(t *testing.T) {
	ctx := context.Background()
	s, _ := concurrentStore(t)
	c, err := s.ClaimPayment(ctx, claim("lkpay", 2000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "lkpay", OrderID: 2000, Key: "payment:lkpay", Claim: c.Claim, PaymentIntentID: "pi_lk", Amount: 1999, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	var errs lockErrors
	note := func(err error) { errs.note(t, err) }
	const refunds, each = 20, 3
	for m := range refunds {
		id := fmt.Sprintf("lkr%d", m)
		rc := store.RefundClaim{Consumer: "order-refund", MessageID: id, OrderID: 2000, Amount: 10, Reason: "requested_by_customer", Key: "refund:" + id, RequestHash: "h"}
		if _, err := s.ClaimRefund(ctx, rc); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range each {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := s.ClaimRefund(ctx, rc)
				note(err)
			}()
			go func() {
				defer wg.Done()
				e, err := s.Effect(ctx, rc.Key)
				if err != nil {
					note(err)
					return
				}
				_, err = s.RecordRefundFailed(ctx, store.RefundFailure{Consumer: rc.Consumer, MessageID: id, OrderID: 2000, Key: rc.Key, Claim: e.Claim, Code: "x"})
				note(err)
			}()
		}
		wg.Wait()
	}
	if errs.deadlocks != 0 || errs.other != 0 {
		t.Fatalf("%d deadlocks (SQLSTATE 40P01) and %d other errors in %d refunds × %d rounds of claim and record", errs.deadlocks, errs.other, refunds, each)
	}
}

// TestInboxRefundGroupsShareOneLockOrder: inbox groups that claim refunds
// of the same payments at once, each group's orders in another order, lock
// the payments in one order (no deadlock, which would send every call of a
// group back to be recorded alone, claiming nothing), and the rule holds
// across them: each payment's refunded amount is what the claims reserved,
// filled up to its limit and never past it.
func TestInboxRefundGroupsShareOneLockOrder(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	const payments, groups, rounds, perGroup = 12, 8, 30, 6
	for i := range payments {
		id := fmt.Sprintf("evt_lo_p%d", i)
		c, err := s.ClaimPayment(ctx, claim(id, int64(9000+i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: id, OrderID: int64(9000 + i),
			Key: "payment:" + id, Claim: c.Claim, PaymentIntentID: "pi_" + id, Amount: 1999, Currency: "usd"}); err != nil {
			t.Fatal(err)
		}
	}
	var errs lockErrors
	var mu sync.Mutex
	reserved := map[int64]int64{}
	var wg sync.WaitGroup
	for g := range groups {
		wg.Go(func() {
			for r := range rounds {
				n := perGroup
				consumers, ids, hashes, sources, claims := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
				currencies, reasons, keys, requests := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
				payloads, orders, amounts := make([][]byte, n), make([]int64, n), make([]int64, n)
				for j := range n {
					// Each group walks the payments from its own place, the
					// other way round every second group.
					o := (g*5 + r + j) % payments
					if g%2 == 1 {
						o = payments - 1 - o
					}
					id := fmt.Sprintf("evt_lo_r%d_%d_%d", g, r, j)
					consumers[j], ids[j], hashes[j], sources[j], claims[j] = "order-refund", id, "h", "test", "refund"
					reasons[j], keys[j], requests[j], payloads[j] = "requested_by_customer", "refund:"+id, "h-"+id, []byte(`{}`)
					orders[j], amounts[j] = int64(9000+o), 20 // 120 refunds of 20 an order: past its 1,999
				}
				claimed, err := groupClaims(s.Pool().Query(ctx, store.InboxGroupInsertSQL, consumers, ids, payloads, hashes, sources, claims,
					orders, amounts, currencies, reasons, keys, requests))
				if err == nil {
					mu.Lock()
					for j, id := range ids {
						if claimed[id] == 1 {
							reserved[orders[j]] += amounts[j]
						}
					}
					mu.Unlock()
				}
				errs.note(t, err)
			}
		})
	}
	wg.Wait()
	if errs.deadlocks != 0 || errs.other != 0 {
		t.Errorf("%d deadlocks, %d other errors in %d groups", errs.deadlocks, errs.other, groups*rounds)
	}
	for i := range payments {
		order := int64(9000 + i)
		got, paid, err := s.RefundedAmount(ctx, order)
		if err != nil || got != reserved[order] || got > paid || got < paid-20 {
			t.Errorf("order %d: refunded %d of %d (%v); the claims reserved %d; want all of it that fits", order, got, paid, err, reserved[order])
		}
	}
}
