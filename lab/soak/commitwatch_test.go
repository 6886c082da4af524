package soak

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestCommitWatchSeesCommitsOnly: a refund probe's processed row and its
// receipt's settled ledger row are noted when their transaction commits,
// not when the statement that wrote them ran, and the other route's rows
// not at all.
func TestCommitWatchSeesCommitsOnly(t *testing.T) {
	ctx := context.Background()
	pool, err := store.Open(ctx, storetest.NewDatabase(t), store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w, stop, err := watchCommits(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, sql := range []string{
		`INSERT INTO processed_messages (consumer, message_id, outcome) VALUES ('order-refund', 'm1', 'refunded'), ('order-placed', 'm1', 'paid')`,
		`INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim) VALUES ('refundemail:m1', 'email', 'order-refund', 'm1', 'h', 'claimed', 1)`,
		`UPDATE effects SET state = 'succeeded' WHERE key = 'refundemail:m1'`,
	} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a notification sent before the commit would have come by now
	if _, _, ok := w.committed("m1"); ok {
		t.Fatal("noted before its transaction committed")
	}
	before := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.await(ctx, []string{"m1"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p, r, ok := w.committed("m1")
	if !ok || p.Before(before) || r.Before(before) {
		t.Fatalf("processed %v, receipt %v, seen %v; want both noted after the commit at %v", p, r, ok, before)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) != 2 {
		t.Fatalf("noted %v, want the refund route's two rows only", w.seen)
	}
}
