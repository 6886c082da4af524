package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestClaimRecordAndWebhookShareOneLockOrder runs, for one message after
// another, a claim's slow path (a retry), a record and a webhook's
// settlement together against real Postgres. They take the message's
// ledger row and its payment row in one order, so Postgres never has to
// break a deadlock (SQLSTATE 40P01).
func TestClaimRecordAndWebhookShareOneLockOrder(t *testing.T) {
	ctx := context.Background()
	pool, err := store.Open(ctx, storetest.NewDatabase(t), store.PoolConfig{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool)
	const messages, each = 20, 3
	var deadlocks, other int
	var mu sync.Mutex
	note := func(err error) {
		if err == nil || errors.Is(err, store.ErrFenced) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			deadlocks++
			return
		}
		other++
		t.Logf("unexpected error: %v", err)
	}
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
	if deadlocks != 0 || other != 0 {
		t.Fatalf("%d deadlocks (SQLSTATE 40P01) and %d other errors in %d messages × %d rounds of claim, record and webhook", deadlocks, other, messages, each)
	}
}
