package stripesim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/paymentintent"
)

const testKey = "sk_test_simulator"

// newSim starts a simulator behind an HTTP test server.
func newSim(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	sim := New(opts)
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	return sim, ts
}

// newClient returns a stripe-go PaymentIntents client for the simulator,
// with its own connection pool, no retry sleeps and the given number of
// retries.
func newClient(t *testing.T, ts *httptest.Server, retries int64) paymentintent.Client {
	t.Helper()
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(ts.URL),
		HTTPClient:        &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second},
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	impl, ok := backend.(*stripe.BackendImplementation)
	if !ok {
		t.Fatalf("backend is a %T", backend)
	}
	impl.SetNetworkRetriesSleep(false)
	return paymentintent.Client{B: backend, Key: testKey}
}

// chargeParams builds the parameters effectively sends for a message.
func chargeParams(key, messageID string, amount int64, pm string) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String("usd"),
		PaymentMethod: stripe.String(pm),
		Confirm:       stripe.Bool(true),
		OffSession:    stripe.Bool(true),
	}
	p.AddMetadata("message_id", messageID)
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("error = %v (%T), want *stripe.Error", err, err)
	}
	return se
}

func replayed(h http.Header) bool { return h.Get("Idempotent-Replayed") == "true" }

// rawPost sends a form POST the way stripe-go would, returning the status,
// headers and body.
func rawPost(t *testing.T, ts *httptest.Server, path, key string, form url.Values) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func validForm(messageID string) url.Values {
	return url.Values{
		"amount":                  {"1500"},
		"currency":                {"usd"},
		"payment_method":          {"pm_card_visa"},
		"confirm":                 {"true"},
		"off_session":             {"true"},
		"metadata[message_id]":    {messageID},
		"payment_method_types[0]": {"card"},
	}
}

// errorBody decodes a Stripe error response.
func errorBody(t *testing.T, body []byte) apiError {
	t.Helper()
	var v struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode error body %s: %v", body, err)
	}
	return v.Error
}

func TestChargeSucceeds(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sim, ts := newSim(t, Options{Now: func() time.Time { return now }})
	c := newClient(t, ts, 0)

	p := chargeParams("payment:evt_1", "evt_1", 1500, "pm_card_visa")
	p.Description = stripe.String("order 7")
	pi, err := c.New(p)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if pi.Object != "payment_intent" || !strings.HasPrefix(pi.ID, "pi_") {
		t.Errorf("object %q id %q, want a payment_intent pi_...", pi.Object, pi.ID)
	}
	if pi.Status != stripe.PaymentIntentStatusSucceeded || pi.Amount != 1500 || pi.AmountReceived != 1500 || pi.Currency != "usd" {
		t.Errorf("got status %s amount %d received %d currency %s", pi.Status, pi.Amount, pi.AmountReceived, pi.Currency)
	}
	if pi.LatestCharge == nil || !strings.HasPrefix(pi.LatestCharge.ID, "ch_") {
		t.Errorf("latest_charge = %+v, want ch_...", pi.LatestCharge)
	}
	// Like Stripe, the test alias becomes a PaymentMethod of its own.
	if pi.PaymentMethod == nil || !strings.HasPrefix(pi.PaymentMethod.ID, "pm_") || pi.PaymentMethod.ID == "pm_card_visa" {
		t.Errorf("payment_method = %+v, want a new pm_… resolved from pm_card_visa", pi.PaymentMethod)
	}
	if pi.Metadata["message_id"] != "evt_1" || pi.Description != "order 7" || pi.Livemode || pi.Created != now.Unix() {
		t.Errorf("metadata %v description %q livemode %v created %d", pi.Metadata, pi.Description, pi.Livemode, pi.Created)
	}
	h := pi.LastResponse.Header
	if replayed(h) || !strings.HasPrefix(h.Get("Request-Id"), "req_") || h.Get("Idempotency-Key") != "payment:evt_1" {
		t.Errorf("headers: replayed %q request-id %q key %q", h.Get("Idempotent-Replayed"), h.Get("Request-Id"), h.Get("Idempotency-Key"))
	}

	got, err := c.Get(pi.ID, nil)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.ID != pi.ID || got.Status != stripe.PaymentIntentStatusSucceeded {
		t.Errorf("get = %s %s", got.ID, got.Status)
	}

	st := sim.Stats()
	if st.Charges != 1 || st.ChargesByMessage["evt_1"] != 1 || st.Requests != 2 {
		t.Errorf("stats = %+v, want 1 charge for evt_1 and 2 requests", st)
	}
}

func TestReplaySameKey(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)

	first, err := c.New(chargeParams("payment:evt_1", "evt_1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.New(chargeParams("payment:evt_1", "evt_1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID {
		t.Errorf("replay id %s, want %s", second.ID, first.ID)
	}
	if !replayed(second.LastResponse.Header) || replayed(first.LastResponse.Header) {
		t.Errorf("Idempotent-Replayed: first %q second %q", first.LastResponse.Header.Get("Idempotent-Replayed"),
			second.LastResponse.Header.Get("Idempotent-Replayed"))
	}
	if string(second.LastResponse.RawJSON) != string(first.LastResponse.RawJSON) {
		t.Error("replayed body differs from the original")
	}
	if got, want := second.LastResponse.Header.Get("Original-Request"), first.LastResponse.RequestID; got != want {
		t.Errorf("Original-Request = %q, want %q", got, want)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge and 1 replay", st)
	}
}

func TestIdempotencyErrorOnChangedParams(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 2)

	if _, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	_, err := c.New(chargeParams("k1", "evt_1", 1600, "pm_card_visa"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusBadRequest || se.Type != stripe.ErrorTypeIdempotency {
		t.Errorf("got %d %s, want 400 idempotency_error", se.HTTPStatusCode, se.Type)
	}

	// The same key on another endpoint is a different request too.
	status, _, body := rawPost(t, ts, "/v1/payment_intents/pi_x/confirm", "k1", url.Values{})
	if e := errorBody(t, body); status != http.StatusBadRequest || e.Type != typeIdempotency {
		t.Errorf("other path: %d %s, want 400 idempotency_error", status, e.Type)
	}
	if st := sim.Stats(); st.Charges != 1 || st.IdempotencyErrors != 2 {
		t.Errorf("stats = %+v, want 1 charge and 2 idempotency errors", st)
	}
}

func TestParamOrderDoesNotMatter(t *testing.T) {
	sim, ts := newSim(t, Options{})
	form := validForm("evt_1")
	form.Set("metadata[order_id]", "7")
	status, _, _ := rawPost(t, ts, "/v1/payment_intents", "k1", form)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	// Encode the same parameters in reverse order.
	var parts []string
	for _, kv := range strings.Split(form.Encode(), "&") {
		parts = append([]string{kv}, parts...)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/payment_intents", strings.NewReader(strings.Join(parts, "&")))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "k1")
	status, h, _ := do(t, req)
	if status != http.StatusOK || !replayed(h) {
		t.Errorf("reordered: status %d replayed %v, want a 200 replay", status, replayed(h))
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Errorf("charges = %d, want 1", st.Charges)
	}
}

// waitInFlight waits until key is reserved by an executing request.
func waitInFlight(t *testing.T, sim *Server, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		sim.mu.Lock()
		e, ok := sim.keys[key]
		inFlight := ok && e.inFlight
		sim.mu.Unlock()
		if inFlight {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("key %q never went in flight", key)
}

func TestConflictWhileInFlight(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{MessageID: "evt_1"}, Kind: FaultDelay, Delay: 500 * time.Millisecond, Times: 1})
	c := newClient(t, ts, 0)

	type result struct {
		pi  *stripe.PaymentIntent
		err error
	}
	done := make(chan result, 1)
	go func() {
		pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
		done <- result{pi, err}
	}()
	waitInFlight(t, sim, "k1")

	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusConflict || se.Type != stripe.ErrorTypeIdempotency || se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
		t.Errorf("got %d %s %s, want 409 idempotency_error idempotency_key_in_use", se.HTTPStatusCode, se.Type, se.Code)
	}

	first := <-done
	if first.err != nil {
		t.Fatalf("first request: %v", first.err)
	}
	// After the first finishes, the key replays.
	again, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil || again.ID != first.pi.ID || !replayed(again.LastResponse.Header) {
		t.Errorf("after completion: %v, id %v", err, again)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Conflicts != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge, 1 conflict, 1 replay", st)
	}
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	sim, ts := newSim(t, Options{Latency: time.Millisecond})
	c := newClient(t, ts, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	for range 20 {
		wg.Go(func() {
			pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
			if err != nil {
				var se *stripe.Error
				if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusConflict {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			mu.Lock()
			ids[pi.ID] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	st := sim.Stats()
	if st.Charges != 1 || len(ids) != 1 {
		t.Errorf("charges %d, distinct ids %d; want 1 and 1", st.Charges, len(ids))
	}
	if st.Replays+st.Conflicts != 19 {
		t.Errorf("replays %d + conflicts %d, want 19", st.Replays, st.Conflicts)
	}
}

func TestValidationNotSaved(t *testing.T) {
	sim, ts := newSim(t, Options{})
	tests := []struct {
		name       string
		edit       func(url.Values)
		status     int
		param      string
		code       string
		wantNoCode bool
	}{
		{"missing amount", func(f url.Values) { f.Del("amount") }, 400, "amount", codeParameterMissing, false},
		{"non-integer amount", func(f url.Values) { f.Set("amount", "12.5") }, 400, "amount", codeParameterInvalidInteger, false},
		{"zero amount", func(f url.Values) { f.Set("amount", "0") }, 400, "amount", codeAmountTooSmall, false},
		{"huge amount", func(f url.Values) { f.Set("amount", "100000000") }, 400, "amount", codeAmountTooLarge, false},
		{"missing currency", func(f url.Values) { f.Del("currency") }, 400, "currency", codeParameterMissing, false},
		{"empty currency", func(f url.Values) { f.Set("currency", "") }, 400, "currency", codeParameterInvalidEmpty, false},
		{"unknown currency", func(f url.Values) { f.Set("currency", "xyz") }, 400, "currency", "", true},
		{"uppercase currency", func(f url.Values) { f.Set("currency", "USD") }, 400, "currency", "", true},
		{"unknown payment method", func(f url.Values) { f.Set("payment_method", "pm_nope") }, 400, "payment_method", codeResourceMissing, false},
		{"unknown parameter", func(f url.Values) { f.Set("colour", "red") }, 400, "colour", codeParameterUnknown, false},
		{"confirm without payment method", func(f url.Values) { f.Del("payment_method") }, 400, "payment_method", codeParameterMissing, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			form := validForm("evt_v")
			tt.edit(form)
			status, _, body := rawPost(t, ts, "/v1/payment_intents", "k-validation", form)
			e := errorBody(t, body)
			if status != tt.status || e.Type != typeInvalidRequest || e.Param != tt.param || e.Code != tt.code {
				t.Errorf("got %d %s param %q code %q, want %d invalid_request_error param %q code %q",
					status, e.Type, e.Param, e.Code, tt.status, tt.param, tt.code)
			}
		})
	}
	// None of the failures was saved: the key still executes.
	status, h, _ := rawPost(t, ts, "/v1/payment_intents", "k-validation", validForm("evt_v"))
	if status != http.StatusOK || replayed(h) {
		t.Errorf("valid request after failures: %d replayed %v, want a fresh 200", status, replayed(h))
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 0 || st.IdempotencyErrors != 0 {
		t.Errorf("stats = %+v, want 1 charge and nothing replayed", st)
	}
}

func TestDeclineSavedAndReplayed(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 2)

	for _, tt := range []struct {
		pm, decline string
	}{
		{"pm_card_chargeDeclined", "generic_decline"},
		{"pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"},
	} {
		t.Run(tt.pm, func(t *testing.T) {
			key := "decline:" + tt.pm
			_, err := c.New(chargeParams(key, "evt_"+tt.pm, 1500, tt.pm))
			se := stripeErr(t, err)
			if se.HTTPStatusCode != http.StatusPaymentRequired || se.Type != stripe.ErrorTypeCard ||
				se.Code != stripe.ErrorCodeCardDeclined || string(se.DeclineCode) != tt.decline {
				t.Errorf("got %d %s %s %s", se.HTTPStatusCode, se.Type, se.Code, se.DeclineCode)
			}
			var cardErr *stripe.CardError
			if !errors.As(err, &cardErr) || string(cardErr.DeclineCode) != tt.decline {
				t.Errorf("Err = %#v, want a *stripe.CardError", se.Err)
			}
			if se.PaymentIntent == nil || se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod ||
				se.PaymentIntent.LastPaymentError == nil || !strings.HasPrefix(se.ChargeID, "ch_") {
				t.Fatalf("embedded payment_intent = %+v, charge %q", se.PaymentIntent, se.ChargeID)
			}
			if replayed(se.LastResponse.Header) {
				t.Error("first decline marked as replayed")
			}

			_, err = c.New(chargeParams(key, "evt_"+tt.pm, 1500, tt.pm))
			again := stripeErr(t, err)
			if again.HTTPStatusCode != http.StatusPaymentRequired || !replayed(again.LastResponse.Header) ||
				again.PaymentIntent.ID != se.PaymentIntent.ID {
				t.Errorf("retry: %d replayed %v, want the saved 402", again.HTTPStatusCode, replayed(again.LastResponse.Header))
			}
		})
	}
	if st := sim.Stats(); st.Charges != 0 || st.Declines != 2 || st.Replays != 2 {
		t.Errorf("stats = %+v, want 0 charges, 2 declines, 2 replays", st)
	}
}

func TestLostAfterThenRetrySameKey(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{MessageID: "evt_1"}, Kind: FaultLostAfter, Times: 1})

	// Without stripe-go retries, on a fresh connection, the loss surfaces.
	c := newClient(t, ts, 0)
	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err == nil {
		t.Fatal("lost response reported success")
	}
	var se *stripe.Error
	if errors.As(err, &se) {
		t.Fatalf("lost response produced a Stripe error %v", se)
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Fatalf("charges after the lost response = %d, want 1 (performed)", st.Charges)
	}

	pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !replayed(pi.LastResponse.Header) || pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Errorf("retry: replayed %v status %s, want the saved success", replayed(pi.LastResponse.Header), pi.Status)
	}
	if st := sim.Stats(); st.Charges != 1 || st.ChargesByMessage["evt_1"] != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge and 1 replay", st)
	}
}

func TestLostAfterStripeGoRetries(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{MessageID: "evt_1"}, Kind: FaultLostAfter, Times: 1})
	c := newClient(t, ts, 1)

	pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !replayed(pi.LastResponse.Header) {
		t.Error("the retried answer is not marked as replayed")
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge and 1 replay", st)
	}
}

func TestNoKeyChargesTwice(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)

	// stripe-go invents a random key per call when none is set.
	for range 2 {
		if _, err := c.New(chargeParams("", "evt_1", 1500, "pm_card_visa")); err != nil {
			t.Fatal(err)
		}
	}
	// A raw request without any key is executed too.
	if status, _, _ := rawPost(t, ts, "/v1/payment_intents", "", validForm("evt_1")); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if st := sim.Stats(); st.Charges != 3 || st.ChargesByMessage["evt_1"] != 3 || st.Replays != 0 {
		t.Errorf("stats = %+v, want 3 charges for evt_1", st)
	}
}

func TestErrorAfterSavedAndReplayed(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{IdempotencyKey: "k1"}, Kind: FaultErrorAfter, Times: 1})
	c := newClient(t, ts, 2) // stripe-go does not retry a 500 to a POST

	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusInternalServerError || se.Type != stripe.ErrorTypeAPI || replayed(se.LastResponse.Header) {
		t.Errorf("got %d %s replayed %v, want a fresh 500 api_error", se.HTTPStatusCode, se.Type, replayed(se.LastResponse.Header))
	}
	_, err = c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	se = stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusInternalServerError || !replayed(se.LastResponse.Header) {
		t.Errorf("retry: %d replayed %v, want the saved 500", se.HTTPStatusCode, replayed(se.LastResponse.Header))
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 1 || st.Requests != 2 {
		t.Errorf("stats = %+v, want 1 charge (performed), 1 replay, 2 requests", st)
	}
}

func TestErrorBeforeNotSaved(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{Path: "/v1/payment_intents"}, Kind: FaultErrorBefore, Status: 502, Times: 1})
	c := newClient(t, ts, 0)

	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusBadGateway || se.Type != stripe.ErrorTypeAPI {
		t.Errorf("got %d %s, want 502 api_error", se.HTTPStatusCode, se.Type)
	}
	if st := sim.Stats(); st.Charges != 0 {
		t.Fatalf("charges = %d after error_before", st.Charges)
	}
	pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil || replayed(pi.LastResponse.Header) {
		t.Fatalf("retry: %v, want a fresh success", err)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 0 {
		t.Errorf("stats = %+v, want 1 charge and no replay", st)
	}
}

func TestStripeGoRetries503(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Kind: FaultErrorBefore, Status: http.StatusServiceUnavailable, Times: 2})
	c := newClient(t, ts, 2)
	if _, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa")); err != nil {
		t.Fatalf("create: %v", err)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 3 {
		t.Errorf("stats = %+v, want 1 charge after 3 requests", st)
	}
}

func TestRateLimit(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Kind: FaultRateLimit, Times: 1})
	c := newClient(t, ts, 2) // stripe-go does not retry rate_limit 429s

	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusTooManyRequests || se.Type != stripe.ErrorTypeInvalidRequest || se.Code != stripe.ErrorCodeRateLimit {
		t.Errorf("got %d %s %s, want 429 invalid_request_error rate_limit", se.HTTPStatusCode, se.Type, se.Code)
	}
	pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil || replayed(pi.LastResponse.Header) {
		t.Fatalf("retry: %v, want a fresh success", err)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 2 {
		t.Errorf("stats = %+v", st)
	}
}

// TestDelayedRequestGoesOnAfterItsClientLeaves: a client that gives up
// during a delay does not stop the request, as Stripe goes on with one it
// received: a retry with the key meanwhile sees 409, the charge is made at
// the delay's end, and a retry then replays its answer. Before, the key was
// released and nothing performed, so a timeout never left a charge behind.
func TestDelayedRequestGoesOnAfterItsClientLeaves(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "requests.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logFile.Close() })
	sim, ts := newSim(t, Options{Logger: slog.New(slog.NewJSONHandler(logFile, nil))})
	const delay = time.Second
	sim.AddFault(Fault{Match: Match{MessageID: "evt_1"}, Kind: FaultDelay, Delay: delay, Times: 1})
	c := newClient(t, ts, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p := chargeParams("k1", "evt_1", 1500, "pm_card_visa")
	p.Context = ctx
	start := time.Now()
	if _, err := c.New(p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the context deadline", err)
	}
	if time.Since(start) > delay/2 {
		t.Error("the client waited out the delay")
	}
	_, err = c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusConflict {
		t.Fatalf("retry during the delay: %v, want 409: the first request is still going on", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sim.Stats().Charges == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned request was never carried out")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if time.Since(start) < delay {
		t.Errorf("charged after %v, before the delay's end", time.Since(start))
	}
	pi, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if err != nil || !replayed(pi.LastResponse.Header) || pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("retry after the delay: %+v, %v; want the saved answer replayed", pi, err)
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Errorf("charges = %d, want 1", st.Charges)
	}
	// The log tells the carried-out request from one never done. Its line
	// is written as its handler returns, just after the answer is saved.
	type entry struct {
		Status     int    `json:"status"`
		Aborted    bool   `json:"aborted"`
		ClientGone bool   `json:"client_gone"`
		Fault      string `json:"fault"`
	}
	var delayed []entry
	for deadline := time.Now().Add(5 * time.Second); len(delayed) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		logged, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(logged)) {
			var e entry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if e.Fault == string(FaultDelay) {
				delayed = append(delayed, e)
			}
		}
	}
	if len(delayed) != 1 || delayed[0].Aborted || !delayed[0].ClientGone || delayed[0].Status != http.StatusOK {
		t.Errorf("delayed request logged as %+v, want one, client_gone with status 200, not aborted", delayed)
	}
}

func TestKeyTooLong(t *testing.T) {
	sim, ts := newSim(t, Options{})
	status, _, body := rawPost(t, ts, "/v1/payment_intents", strings.Repeat("k", 256), validForm("evt_1"))
	if e := errorBody(t, body); status != http.StatusBadRequest || e.Type != typeInvalidRequest {
		t.Errorf("got %d %s, want 400 invalid_request_error", status, e.Type)
	}
	status, _, _ = rawPost(t, ts, "/v1/payment_intents", strings.Repeat("k", 255), validForm("evt_1"))
	if status != http.StatusOK {
		t.Errorf("255-character key: status %d", status)
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Errorf("charges = %d, want 1", st.Charges)
	}
}

func TestKeyTTL(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	sim, ts := newSim(t, Options{Now: clock, KeyTTL: time.Hour})

	post := func() bool {
		status, h, _ := rawPost(t, ts, "/v1/payment_intents", "k1", validForm("evt_1"))
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		return replayed(h)
	}
	post()
	advance(time.Hour)
	if !post() {
		t.Error("key not replayed at exactly its TTL")
	}
	advance(time.Second)
	if post() {
		t.Error("key replayed after its TTL")
	}
	if st := sim.Stats(); st.Charges != 2 {
		t.Errorf("charges = %d, want 2", st.Charges)
	}
}

func TestSearchByMessageID(t *testing.T) {
	_, ts := newSim(t, Options{SearchLag: NoSearchLag})
	c := newClient(t, ts, 0)
	if _, err := c.New(chargeParams("a", "evt_1", 1500, "pm_card_chargeDeclined")); err == nil {
		t.Fatal("decline succeeded")
	}
	ok, err := c.New(chargeParams("b", "evt_1", 1500, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.New(chargeParams("c", "evt_2", 900, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}

	search := func(query string) []*stripe.PaymentIntent {
		t.Helper()
		it := c.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: query}})
		var out []*stripe.PaymentIntent
		for it.Next() {
			out = append(out, it.PaymentIntent())
		}
		if err := it.Err(); err != nil {
			t.Fatalf("search %q: %v", query, err)
		}
		return out
	}
	if got := search("metadata['message_id']:'evt_1'"); len(got) != 2 {
		t.Errorf("evt_1: %d results, want 2", len(got))
	}
	got := search(`metadata["message_id"]:"evt_1" AND status:'succeeded'`)
	if len(got) != 1 || got[0].ID != ok.ID {
		t.Errorf("evt_1 succeeded: %v, want [%s]", got, ok.ID)
	}
	if got := search("metadata['message_id']:'evt_3'"); len(got) != 0 {
		t.Errorf("evt_3: %d results, want 0", len(got))
	}
	if got := search("amount>1000 AND currency:'usd'"); len(got) != 2 {
		t.Errorf("amount>1000: %d results, want 2", len(got))
	}

	// Pagination through next_page.
	it := c.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{
		Query: "currency:'usd'", Limit: stripe.Int64(1)}})
	n := 0
	for it.Next() {
		n++
	}
	if it.Err() != nil || n != 3 {
		t.Errorf("paged search: %d results, err %v; want 3", n, it.Err())
	}

	// The raw search_result shape.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/payment_intents/search?query="+
		url.QueryEscape("metadata['message_id']:'evt_2'"), nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	status, _, body := do(t, req)
	var res struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
		URL     string            `json:"url"`
	}
	if err := json.Unmarshal(body, &res); err != nil || status != http.StatusOK {
		t.Fatalf("raw search: %d %v", status, err)
	}
	if res.Object != "search_result" || len(res.Data) != 1 || res.HasMore || res.URL != "/v1/payment_intents/search" {
		t.Errorf("raw search = %s", body)
	}

	for _, bad := range []string{"", "message_id:'evt_1'", "metadata['message_id']:evt_1", "status:'a' OR status:'b'", "status:'a' AND"} {
		it := c.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: bad}})
		for it.Next() {
		}
		if se := stripeErr(t, it.Err()); se.HTTPStatusCode != http.StatusBadRequest {
			t.Errorf("query %q: status %d, want 400", bad, se.HTTPStatusCode)
		}
	}
}

func TestConfirmAndRetrieve(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)

	p := chargeParams("k1", "evt_1", 1500, "pm_card_visa")
	p.Confirm = stripe.Bool(false)
	p.OffSession = nil
	pi, err := c.New(p)
	if err != nil {
		t.Fatal(err)
	}
	if pi.Status != stripe.PaymentIntentStatusRequiresConfirmation {
		t.Fatalf("status %s, want requires_confirmation", pi.Status)
	}
	if st := sim.Stats(); st.Charges != 0 {
		t.Fatalf("charges = %d before confirmation", st.Charges)
	}

	cp := &stripe.PaymentIntentConfirmParams{OffSession: stripe.Bool(true)}
	cp.SetIdempotencyKey("confirm-1")
	confirmed, err := c.Confirm(pi.ID, cp)
	if err != nil || confirmed.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("confirm: %v %v", err, confirmed)
	}
	if got, err := c.Get(pi.ID, nil); err != nil || got.Status != stripe.PaymentIntentStatusSucceeded {
		t.Errorf("get after confirm: %v %v", err, got)
	}

	cp2 := &stripe.PaymentIntentConfirmParams{}
	cp2.SetIdempotencyKey("confirm-2")
	_, err = c.Confirm(pi.ID, cp2)
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusBadRequest || se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
		t.Errorf("second confirm: %d %s", se.HTTPStatusCode, se.Code)
	}

	_, err = c.Get("pi_missing", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusNotFound || se.Code != stripe.ErrorCodeResourceMissing {
		t.Errorf("get missing: %d %s", se.HTTPStatusCode, se.Code)
	}
	if st := sim.Stats(); st.Charges != 1 || st.ChargesByMessage["evt_1"] != 1 {
		t.Errorf("stats = %+v, want 1 charge", st)
	}
}

func TestAuthFailure(t *testing.T) {
	sim, ts := newSim(t, Options{})
	for _, auth := range []string{"", "Bearer sk_live_abcdefghijklmnop", "Bearer pk_test_123456", "Bearer sk_test_"} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/payment_intents", strings.NewReader(validForm("evt_1").Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", "k1")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		status, _, body := do(t, req)
		e := errorBody(t, body)
		if status != http.StatusUnauthorized || e.Type != typeAuthentication {
			t.Errorf("auth %q: %d %s, want 401 authentication_error", auth, status, e.Type)
		}
		if strings.Contains(e.Message, "abcdefghijklmnop") {
			t.Errorf("auth %q: the key is echoed in %q", auth, e.Message)
		}
	}
	// stripe-go with a bad key.
	c := newClient(t, ts, 0)
	c.Key = "sk_live_nope"
	_, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa"))
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusUnauthorized {
		t.Errorf("stripe-go bad key: %d", se.HTTPStatusCode)
	}
	// Nothing was saved under the key.
	status, h, _ := rawPost(t, ts, "/v1/payment_intents", "k1", validForm("evt_1"))
	if status != http.StatusOK || replayed(h) {
		t.Errorf("authorised request: %d replayed %v", status, replayed(h))
	}
	// Basic auth with the key as user name works too.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/payment_intents/pi_missing", nil)
	req.SetBasicAuth(testKey, "")
	if status, _, _ := do(t, req); status != http.StatusNotFound {
		t.Errorf("basic auth: %d, want 404", status)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 7 {
		t.Errorf("stats = %+v, want 1 charge and 7 requests", st)
	}
}

func TestUnknownRoute(t *testing.T) {
	_, ts := newSim(t, Options{})
	status, _, body := rawPost(t, ts, "/v1/charges", "k", url.Values{})
	if e := errorBody(t, body); status != http.StatusNotFound || e.Type != typeInvalidRequest {
		t.Errorf("got %d %s", status, e.Type)
	}
}

func TestFaultMatching(t *testing.T) {
	sim, ts := newSim(t, Options{})
	sim.AddFault(Fault{Match: Match{MessageID: "evt_bad"}, Kind: FaultErrorBefore})
	for range 2 {
		if status, _, _ := rawPost(t, ts, "/v1/payment_intents", "", validForm("evt_bad")); status != 500 {
			t.Errorf("unlimited fault: status %d", status)
		}
	}
	if status, _, _ := rawPost(t, ts, "/v1/payment_intents", "", validForm("evt_good")); status != 200 {
		t.Errorf("other message: status %d", status)
	}
	sim.ClearFaults()
	if status, _, _ := rawPost(t, ts, "/v1/payment_intents", "", validForm("evt_bad")); status != 200 {
		t.Errorf("after ClearFaults: status %d", status)
	}
	if st := sim.Stats(); st.Charges != 2 {
		t.Errorf("charges = %d, want 2", st.Charges)
	}
}

func TestControlAPI(t *testing.T) {
	sim, ts := newSim(t, Options{})
	control := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		status, _, out := do(t, req)
		return status, out
	}

	if status, out := control(http.MethodPost, "/_sim/faults",
		`{"match":{"message_id":"evt_1"},"kind":"lost_after","times":1}`); status != http.StatusCreated {
		t.Fatalf("add fault: %d %s", status, out)
	}
	if status, out := control(http.MethodPost, "/_sim/faults",
		`{"match":{"path":"/v1/payment_intents"},"kind":"delay","delay":"20ms"}`); status != http.StatusCreated {
		t.Fatalf("add delay fault: %d %s", status, out)
	}
	for _, bad := range []string{
		`{"kind":"explode"}`,
		`{"kind":"delay"}`,
		`{"kind":"error_before","status":200}`,
		`{"kind":"error_before","matсh":{}}`,
		`{"kind":"delay","delay":"5s","delay_ms":5}`,
		`not json`,
	} {
		if status, _ := control(http.MethodPost, "/_sim/faults", bad); status != http.StatusBadRequest {
			t.Errorf("fault %s: status %d, want 400", bad, status)
		}
	}
	status, out := control(http.MethodGet, "/_sim/faults", "")
	var listed struct {
		Faults []struct {
			Kind      string `json:"kind"`
			DelayMS   int64  `json:"delay_ms"`
			Remaining *int   `json:"remaining"`
		} `json:"faults"`
	}
	if err := json.Unmarshal(out, &listed); err != nil || status != 200 || len(listed.Faults) != 2 {
		t.Fatalf("list faults: %d %s", status, out)
	}
	if f := listed.Faults[0]; f.Kind != "lost_after" || f.Remaining == nil || *f.Remaining != 1 {
		t.Errorf("first fault = %+v", f)
	}
	if f := listed.Faults[1]; f.DelayMS != 20 || f.Remaining != nil {
		t.Errorf("second fault = %+v", f)
	}

	// The lost_after fault fires through the handler.
	c := newClient(t, ts, 0)
	if _, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa")); err == nil {
		t.Error("lost_after fault from the control API did not fire")
	}

	if status, out := control(http.MethodPost, "/_sim/latency", `{"latency_ms":5}`); status != 200 {
		t.Errorf("latency: %d %s", status, out)
	}
	if status, _ := control(http.MethodPost, "/_sim/latency", `{"latency_ms":-1}`); status != 400 {
		t.Errorf("negative latency accepted")
	}
	if _, out := control(http.MethodGet, "/_sim/latency", ""); !strings.Contains(string(out), `"latency_ms":5`) {
		t.Errorf("latency = %s", out)
	}

	status, out = control(http.MethodGet, "/_sim/stats", "")
	var st map[string]any
	if err := json.Unmarshal(out, &st); err != nil || status != 200 {
		t.Fatalf("stats: %d %s", status, out)
	}
	for _, field := range []string{"charges", "charges_by_message", "requests", "replays", "idempotency_errors", "conflicts", "declines"} {
		if _, ok := st[field]; !ok {
			t.Errorf("stats JSON lacks %q: %s", field, out)
		}
	}
	if st["charges"] != float64(1) {
		t.Errorf("charges = %v, want 1", st["charges"])
	}

	if status, _ := control(http.MethodDelete, "/_sim/faults", ""); status != 200 {
		t.Errorf("clear faults: %d", status)
	}
	if status, _ := control(http.MethodPost, "/_sim/reset", ""); status != 200 {
		t.Errorf("reset: %d", status)
	}
	if got := sim.Stats(); got.Charges != 0 || got.Requests != 0 || len(got.ChargesByMessage) != 0 {
		t.Errorf("stats after reset = %+v", got)
	}
	// After a reset the key is forgotten: the same request charges anew.
	if _, err := c.New(chargeParams("k1", "evt_1", 1500, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	if got := sim.Stats(); got.Charges != 1 || got.Replays != 0 {
		t.Errorf("stats after reset and charge = %+v", got)
	}
}

func TestFaultJSONRoundTrip(t *testing.T) {
	in := Fault{Match: Match{MessageID: "evt_1", Path: "/v1/payment_intents"}, Kind: FaultDelay, Delay: 1500 * time.Millisecond, Times: 3}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"match":{"message_id":"evt_1","path":"/v1/payment_intents"},"kind":"delay","delay_ms":1500,"times":3}`
	if string(data) != want {
		t.Errorf("marshal = %s, want %s", data, want)
	}
	var out Fault
	if err := json.Unmarshal(data, &out); err != nil || out != in {
		t.Errorf("round trip = %+v, %v", out, err)
	}
}

func TestMaskKey(t *testing.T) {
	for in, want := range map[string]string{
		"sk_live_abcdefghijklmnop": "sk_live_********mnop",
		"short":                    "*****",
		"nounderscoreatallhere":    "********",
	} {
		if got := maskKey(in); got != want {
			t.Errorf("maskKey(%q) = %q, want %q", in, got, want)
		}
	}
}
