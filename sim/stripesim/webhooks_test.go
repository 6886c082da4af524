package stripesim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/effectively/effectively/sim/simfault"
)

// receiver verifies each delivery with stripe-go, as the worker does, and
// refuses the first `fail` ones with a 503.
type receiver struct {
	mu     sync.Mutex
	secret string
	fail   int
	seen   []stripe.Event
	bad    int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.fail > 0 {
		rc.fail--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	ev, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), rc.secret)
	if err != nil {
		rc.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.seen = append(rc.seen, ev)
}

func (rc *receiver) events() []stripe.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]stripe.Event(nil), rc.seen...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWebhooksDeliverSignedEventsAtLeastOnce(t *testing.T) {
	sim, ts := newSim(t, Options{})
	rc := &receiver{secret: "whsec_test_" + randomStem(), fail: 2}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	if err := sim.StartWebhooks(WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL, Copies: 2, MaxDelay: 50 * time.Millisecond, RetryInitial: 10 * time.Millisecond},
		Secret:        rc.secret,
	}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, ts, 0)
	paid, err := c.New(chargeParams("payment:evt_w1", "evt_w1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.New(chargeParams("payment:evt_w2", "evt_w2", 1500, "pm_card_chargeDeclined")); err == nil {
		t.Fatal("declined card charged")
	}
	if err := sim.EmitIntentEvent(EventIntentProcessing, paid.ID, "processing"); err != nil {
		t.Fatal(err)
	}
	if err := sim.Refund(paid.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "8 deliveries", func() bool { return len(rc.events()) >= 8 && sim.WebhookStats().Delivered >= 8 })

	byID := map[string]int{}
	byType := map[string]int{}
	for _, ev := range rc.events() {
		byID[ev.ID]++
		byType[string(ev.Type)]++
		if ev.APIVersion != stripe.APIVersion {
			t.Errorf("event %s has api_version %s", ev.ID, ev.APIVersion)
		}
		if ev.Type == EventIntentSucceeded {
			var pi stripe.PaymentIntent
			if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil || pi.ID != paid.ID || pi.Metadata["message_id"] != "evt_w1" || pi.Status != "succeeded" {
				t.Errorf("succeeded event object %+v (%v)", pi, err)
			}
		}
	}
	if len(byID) != 4 {
		t.Errorf("%d distinct events, want 4: %v", len(byID), byID)
	}
	for id, n := range byID {
		if n != 2 {
			t.Errorf("event %s delivered %d times, want 2 copies", id, n)
		}
	}
	for _, typ := range []string{EventIntentSucceeded, EventIntentFailed, EventIntentProcessing, EventChargeRefunded} {
		if byType[typ] != 2 {
			t.Errorf("%s delivered %d times, want 2", typ, byType[typ])
		}
	}
	st := sim.WebhookStats()
	if st.Retries < 2 || st.Delivered != 8 || rc.bad != 0 {
		t.Errorf("stats %+v, bad signatures %d: want ≥2 retries after the 503s, 8 delivered, none bad", st, rc.bad)
	}
	sim.StopWebhooks()
	if _, err := c.New(chargeParams("payment:evt_w3", "evt_w3", 1500, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(rc.events()); n != 8 {
		t.Errorf("%d deliveries after StopWebhooks, want still 8", n)
	}
}
