package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// fakePublisher confirms events, fails those in fail, and can hold each
// publish until release is closed.
type fakePublisher struct {
	mu        sync.Mutex
	published []string
	fail      map[string]bool
	entered   chan string
	release   chan struct{}
}

func (p *fakePublisher) Name() string { return "fake" }

func (p *fakePublisher) Publish(ctx context.Context, e store.OutboxEvent) (bool, error) {
	if p.entered != nil {
		p.entered <- e.EventID
		select {
		case <-p.release:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail[e.EventID] {
		return false, errors.New("broker refused")
	}
	p.published = append(p.published, e.EventID)
	return false, nil
}

func insertEvents(t *testing.T, st *store.Store, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("order.paid:evt_%d", i)
		if _, err := st.Pool().Exec(context.Background(),
			`INSERT INTO outbox (event_id, topic, payload, created_at) VALUES ($1, 'order.paid', '{}', now() - make_interval(secs => $2))`,
			ids[i], n-i); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestRelayHoldsNoRowLockAcrossThePublish holds a publish at the broker and
// meanwhile locks the claimed row with NOWAIT, as any other writer would:
// the lock is free. A second relay claims nothing while the lease runs, and
// the held batch is marked once the broker confirms it.
func TestRelayHoldsNoRowLockAcrossThePublish(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	ids := insertEvents(t, st, 1)
	pub := &fakePublisher{entered: make(chan string, 1), release: make(chan struct{})}
	relay, err := outbox.New(st, pub, outbox.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, err := relay.RelayPending(ctx); done <- err }()
	select {
	case <-pub.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not publish")
	}
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox WHERE event_id = $1 FOR UPDATE NOWAIT`, ids[0]); err != nil {
		t.Errorf("the row is locked while its publish waits for the broker: %v", err)
	}
	_ = tx.Rollback(ctx)
	other := &fakePublisher{}
	relay2, err := outbox.New(st, other, outbox.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay2.RelayPending(ctx); err != nil || n != 0 || len(other.published) != 0 {
		t.Errorf("a second relay published %v (%d marked, %v) during the first one's lease", other.published, n, err)
	}
	close(pub.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := st.OutboxUnpublished(ctx); err != nil || n != 0 {
		t.Fatalf("%d unpublished after the confirmation (%v)", n, err)
	}
}

// TestRelayReleasesWhatTheBrokerRefused: a refused publish stops the batch;
// the confirmed events are marked, the rest released at once (not left to
// the lease) and published by the next pass, oldest first.
func TestRelayReleasesWhatTheBrokerRefused(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	ids := insertEvents(t, st, 4)
	pub := &fakePublisher{fail: map[string]bool{ids[2]: true}}
	relay, err := outbox.New(st, pub, outbox.Config{Logger: testenv.Logger(t), Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := relay.RelayPending(ctx)
	if err == nil || n != 2 {
		t.Fatalf("first pass: %d marked, %v; want 2 and the refusal", n, err)
	}
	if left, _ := st.OutboxUnpublished(ctx); left != 2 {
		t.Fatalf("%d unpublished, want 2", left)
	}
	pub.mu.Lock()
	pub.fail = nil
	pub.mu.Unlock()
	if n, err := relay.RelayPending(ctx); err != nil || n != 2 {
		t.Fatalf("second pass: %d marked, %v; want the 2 released events", n, err)
	}
	want := []string{ids[0], ids[1], ids[2], ids[3]}
	if fmt.Sprint(pub.published) != fmt.Sprint(want) {
		t.Fatalf("published %v, want %v in order", pub.published, want)
	}
	if st := relay.Stats(); st.Published != 4 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
}
