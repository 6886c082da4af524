package stripesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestBoundedState creates more PaymentIntents (each with its own
// idempotency key) and Refunds than the bounds: the Server keeps exactly
// the bound of each, the newest still work (retrieve, idempotent replay,
// refund), and the oldest are forgotten as documented (retrieve answers 404,
// a reused key executes again). Stats still count everything.
func TestBoundedState(t *testing.T) {
	const bound, n = 3, 10
	sim, ts := newSim(t, Options{MaxObjects: bound, MaxIdempotencyKeys: bound})
	ids := make([]string, n)
	for i := range n {
		status, _, body := rawPost(t, ts, "/v1/payment_intents", fmt.Sprintf("key_%d", i), validForm(fmt.Sprintf("evt_%d", i)))
		if status != http.StatusOK {
			t.Fatalf("create %d: status %d %s", i, status, body)
		}
		var pi struct{ ID string }
		if err := json.Unmarshal(body, &pi); err != nil {
			t.Fatal(err)
		}
		ids[i] = pi.ID
		if status, _, body := rawPost(t, ts, "/v1/refunds", fmt.Sprintf("refund_%d", i), url.Values{"payment_intent": {pi.ID}, "amount": {"100"}}); status != http.StatusOK {
			t.Fatalf("refund %d: status %d %s", i, status, body)
		}
	}
	intents, refunds, keys := sim.Objects()
	if intents != bound || refunds != bound || keys != bound {
		t.Fatalf("kept %d intents, %d refunds, %d keys; want %d of each", intents, refunds, keys, bound)
	}
	get := func(id string) int {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/payment_intents/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		status, _, _ := do(t, req)
		return status
	}
	if got := get(ids[n-1]); got != http.StatusOK {
		t.Errorf("retrieve the newest: status %d", got)
	}
	if got := get(ids[0]); got != http.StatusNotFound {
		t.Errorf("retrieve the oldest, evicted: status %d, want 404", got)
	}
	// Keys are reserved key_0, refund_0, key_1, …: the three kept are
	// refund_8, key_9 and refund_9, and the newest is still replayed.
	status, h, body := rawPost(t, ts, "/v1/refunds", fmt.Sprintf("refund_%d", n-1), url.Values{"payment_intent": {ids[n-1]}, "amount": {"100"}})
	if status != http.StatusOK || !replayed(h) {
		t.Errorf("replay of the newest key: status %d, replayed %v: %s", status, replayed(h), body)
	}
	// key_0 was evicted: reusing it executes a new request (a new charge).
	status, h, _ = rawPost(t, ts, "/v1/payment_intents", "key_0", validForm("evt_0"))
	if status != http.StatusOK || replayed(h) {
		t.Errorf("reuse of an evicted key: status %d, replayed %v; want a new execution", status, replayed(h))
	}
	st := sim.Stats()
	if st.Charges != n+1 || st.Refunds != n || st.ChargesByMessage["evt_0"] != 2 {
		t.Errorf("stats: %d charges, %d refunds, evt_0 charged %d times; want %d, %d, 2", st.Charges, st.Refunds, st.ChargesByMessage["evt_0"], n+1, n)
	}
	if intents, refunds, keys := sim.Objects(); intents != bound || refunds != bound || keys != bound {
		t.Errorf("after the reuse: kept %d intents, %d refunds, %d keys; want %d of each", intents, refunds, keys, bound)
	}
}

// TestBoundKeepsInFlightKeys: a key whose request is still executing is
// never evicted, so a concurrent retry still meets the 409.
func TestBoundKeepsInFlightKeys(t *testing.T) {
	sim := New(Options{MaxIdempotencyKeys: 1})
	if saved, e := sim.reserve("slow", [32]byte{1}, "req_1"); saved != nil || e != nil {
		t.Fatal("first reservation refused")
	}
	if saved, e := sim.reserve("other", [32]byte{2}, "req_2"); saved != nil || e != nil {
		t.Fatal("second reservation refused")
	}
	if _, e := sim.reserve("slow", [32]byte{1}, "req_3"); e == nil || e.status != http.StatusConflict {
		t.Errorf("retry of an in-flight key: %v, want 409", e)
	}
}

// TestDefaultBoundsExceedARun: the defaults are far above what a bench or
// soak run creates (tens of thousands), and keys still expire by KeyTTL.
func TestDefaultBoundsExceedARun(t *testing.T) {
	sim := New(Options{})
	if sim.maxObjects < 1_000_000 || sim.maxKeys < 1_000_000 || sim.keyTTL != 24*time.Hour {
		t.Errorf("defaults: %d objects, %d keys, key TTL %s", sim.maxObjects, sim.maxKeys, sim.keyTTL)
	}
}
