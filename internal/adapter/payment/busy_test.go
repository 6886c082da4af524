package payment

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/sim/stripesim"
)

// TestFindInWindowInABusyAccount: a claim past the key window in an account
// that created more PaymentIntents since the claim than a list may examine
// (MaxListed). The lookup must still find the message's PaymentIntent
// (Search, which sees everything older than its lag) instead of failing on
// "window too large" at every retry. A claim younger than the lag is
// looked up by a list that is never longer than the lag.
func TestFindInWindowInABusyAccount(t *testing.T) {
	var now atomic.Int64
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	sim := stripesim.New(stripesim.Options{Now: clock, SearchLag: time.Minute})
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	c, err := New(Config{APIKey: testKey, BaseURL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	ours, err := c.Create(ctx, ChargeRequest{IdempotencyKey: "paymentintent:evt_busy", MessageID: "evt_busy", OrderID: 1, Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Confirm(ctx, ours.PaymentIntentID, "payment:evt_busy"); err != nil {
		t.Fatal(err)
	}
	// The rest of the account's day: more PaymentIntents than a list may
	// examine, created after it.
	const others = MaxListed + 50
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < others; i += 8 {
				id := fmt.Sprintf("evt_other%d", i)
				if _, err := c.Create(ctx, ChargeRequest{IdempotencyKey: "paymentintent:" + id, MessageID: id, OrderID: int64(i + 2), Amount: 100, Currency: "usd", PaymentMethod: "pm_card_visa"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	now.Store(t0.Add(25 * time.Hour).UnixNano())

	from, to := t0.Add(-5*time.Minute), clock().Add(5*time.Minute)
	for try := range 3 {
		found, err := c.FindInWindow(ctx, "evt_busy", from, to)
		if err != nil || found.PaymentIntentID != ours.PaymentIntentID || !found.Succeeded() {
			t.Fatalf("try %d past the key window in a busy account: %+v, %v; want %s, succeeded", try, found, err, ours.PaymentIntentID)
		}
	}
	// Created just now, so Search does not see it yet: the lookup of an
	// old claim also lists the last SearchLag, and that of a young claim
	// lists its whole (short) window.
	late, err := c.Create(ctx, ChargeRequest{IdempotencyKey: "paymentintent:evt_late", MessageID: "evt_late", OrderID: 99999, Amount: 300, Currency: "usd", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	if found, err := c.FindInWindow(ctx, "evt_late", from, to); err != nil || found.PaymentIntentID != late.PaymentIntentID {
		t.Fatalf("a PaymentIntent younger than the search lag of an old claim: %+v, %v; want %s", found, err, late.PaymentIntentID)
	}
	if found, err := c.FindInWindow(ctx, "evt_late", clock().Add(-10*time.Minute), to); err != nil || found.PaymentIntentID != late.PaymentIntentID {
		t.Fatalf("a young claim: %+v, %v; want %s", found, err, late.PaymentIntentID)
	}
	if _, err := c.FindInWindow(ctx, "evt_none", from, to); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a message with no PaymentIntent: %v, want ErrNotFound", err)
	}
}
