package stripesim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/effectively/effectively/sim/simlimit"
)

// TestRateLimitsGlobalAndPerEndpoint: past the endpoint's limit a create is
// answered 429 endpoint-rate with Retry-After, nothing performed and the
// key not saved (the same key succeeds later); another endpoint still
// answers until the global limit is reached, then global-rate.
func TestRateLimitsGlobalAndPerEndpoint(t *testing.T) {
	sim, ts := newSim(t, Options{RateLimits: RateLimits{
		Global:   simlimit.Rate{PerSecond: 0.001, Burst: 4},
		Endpoint: simlimit.Rate{PerSecond: 0.001, Burst: 2},
	}})
	var ids []string
	for i := range 2 {
		status, _, body := rawPost(t, ts, "/v1/payment_intents", fmt.Sprintf("key_%d", i), validForm(fmt.Sprintf("evt_%d", i)))
		if status != http.StatusOK {
			t.Fatalf("create %d inside the limits: status %d %s", i, status, body)
		}
		var pi struct{ ID string }
		if err := json.Unmarshal(body, &pi); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, pi.ID)
	}
	status, h, body := rawPost(t, ts, "/v1/payment_intents", "key_2", validForm("evt_2"))
	if status != http.StatusTooManyRequests || h.Get("Stripe-Rate-Limited-Reason") != ReasonEndpointRate {
		t.Fatalf("third create: status %d reason %q, want 429 %s: %s", status, h.Get("Stripe-Rate-Limited-Reason"), ReasonEndpointRate, body)
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want whole seconds ≥ 1", h.Get("Retry-After"))
	}
	var e struct{ Error struct{ Code string } }
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != codeRateLimit {
		t.Errorf("429 body = %s, want code %s", body, codeRateLimit)
	}
	// Another endpoint (confirm) has its own bucket but shares the global one.
	for i, id := range ids {
		status, _, body := rawPost(t, ts, "/v1/payment_intents/"+id+"/confirm", fmt.Sprintf("confirm_%d", i), nil)
		if status == http.StatusTooManyRequests { // validForm confirms already: 400, but not limited
			t.Fatalf("confirm %d: status %d %s", i, status, body)
		}
	}
	status, h, _ = rawPost(t, ts, "/v1/refunds", "refund_0", nil)
	if status != http.StatusTooManyRequests || h.Get("Stripe-Rate-Limited-Reason") != ReasonGlobalRate {
		t.Fatalf("fifth request: status %d reason %q, want 429 %s", status, h.Get("Stripe-Rate-Limited-Reason"), ReasonGlobalRate)
	}
	st := sim.Stats()
	if st.RateLimited != 2 || st.RateLimitedByReason[ReasonEndpointRate] != 1 || st.RateLimitedByReason[ReasonGlobalRate] != 1 {
		t.Errorf("RateLimited = %d %v, want 1 of each reason", st.RateLimited, st.RateLimitedByReason)
	}
	if st.Charges != 2 {
		t.Errorf("Charges = %d, want 2", st.Charges)
	}
	// The refused key was not saved: with the limits off it executes.
	sim.SetRateLimits(RateLimits{})
	if status, h, body := rawPost(t, ts, "/v1/payment_intents", "key_2", validForm("evt_2")); status != http.StatusOK || replayed(h) {
		t.Fatalf("key_2 after the limits: status %d replayed %v: %s", status, replayed(h), body)
	}
}

// TestRateLimitsPerAccount: each API key has its own buckets.
func TestRateLimitsPerAccount(t *testing.T) {
	_, ts := newSim(t, Options{RateLimits: RateLimits{Global: simlimit.Rate{PerSecond: 0.001, Burst: 1}}})
	post := func(key, idem string) int {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/payment_intents", strings.NewReader(validForm(idem).Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", idem)
		status, _, _ := do(t, req)
		return status
	}
	if s := post("sk_test_a", "a1"); s != http.StatusOK {
		t.Fatalf("account a: %d", s)
	}
	if s := post("sk_test_b", "b1"); s != http.StatusOK {
		t.Fatalf("account b, its own bucket: %d", s)
	}
	if s := post("sk_test_a", "a2"); s != http.StatusTooManyRequests {
		t.Fatalf("account a past its limit: %d, want 429", s)
	}
}
