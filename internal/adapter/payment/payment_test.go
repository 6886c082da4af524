package payment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"

	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/sim/stripesim"
)

const testKey = "sk_test_effectively_secret_4242"

// newTestClient returns a Client talking to a fresh simulator. cfg.APIKey
// defaults to testKey; cfg.BaseURL is always the simulator's.
func newTestClient(t *testing.T, cfg Config) (*Client, *stripesim.Server) {
	t.Helper()
	sim := stripesim.New(stripesim.Options{SearchLag: stripesim.NoSearchLag})
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	cfg.BaseURL = ts.URL
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, sim
}

func chargeRequest(messageID string) ChargeRequest {
	return ChargeRequest{
		IdempotencyKey: "payment:" + messageID,
		MessageID:      messageID,
		OrderID:        42,
		Amount:         1500,
		Currency:       "usd",
		PaymentMethod:  "pm_card_visa",
		CustomerRef:    "customer 7",
	}
}

// paymentError extracts the *Error from err, failing the test if there is
// none.
func paymentError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want one wrapping *payment.Error", err, err)
	}
	return e
}

func TestChargeSucceeds(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if !ch.Succeeded() || ch.Amount != 1500 || ch.Currency != "usd" || ch.MessageID != "evt_1" || ch.Replayed {
		t.Errorf("charge = %+v", ch)
	}
	if !strings.HasPrefix(ch.PaymentIntentID, "pi_") || !strings.HasPrefix(ch.ChargeID, "ch_") {
		t.Errorf("ids: %q %q", ch.PaymentIntentID, ch.ChargeID)
	}
	if st := sim.Stats(); st.Charges != 1 || st.ChargesByMessage["evt_1"] != 1 {
		t.Errorf("stats = %+v, want 1 charge for evt_1", st)
	}
	if stripe.Key != "" {
		t.Error("New set stripe.Key")
	}
}

func TestChargeSameKeyChargesOnce(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	req := chargeRequest("evt_1")
	first, err := c.Charge(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("second Charge: %v", err)
	}
	if second.PaymentIntentID != first.PaymentIntentID || !second.Replayed || first.Replayed {
		t.Errorf("first %+v, second %+v; want the same PaymentIntent, the second replayed", first, second)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge and 1 replay", st)
	}

	// A different key for the same message is a different charge: the key,
	// not the message ID, is what deduplicates.
	req.IdempotencyKey = "other"
	if _, err := c.Charge(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if st := sim.Stats(); st.Charges != 2 {
		t.Errorf("charges = %d, want 2", st.Charges)
	}
}

func TestChargeParamsAreDeterministic(t *testing.T) {
	req := chargeRequest("evt_1")
	encode := func() string {
		v := &form.Values{}
		form.AppendTo(v, chargeParams(req, ""))
		return v.Encode()
	}
	first := encode()
	time.Sleep(2 * time.Millisecond)
	for range 5 {
		if got := encode(); got != first {
			t.Fatalf("params differ between calls:\n%s\n%s", first, got)
		}
	}
	const want = "amount=1500&confirm=true&currency=usd&description=customer+7" +
		"&metadata[effectively_test_payment_method]=pm_card_visa&metadata[message_id]=evt_1&metadata[order_id]=42&payment_method=pm_card_visa" +
		"&payment_method_types[0]=card&off_session=true"
	if first != want {
		t.Errorf("params:\n got %s\nwant %s", first, want)
	}
	// The Idempotency-Key is set by Charge, scoped (see namespace_test.go).

	req.OrderID, req.CustomerRef, req.Currency = 0, "", "EUR"
	v := &form.Values{}
	form.AppendTo(v, chargeParams(req, ""))
	if got := v.Encode(); strings.Contains(got, "order_id") || strings.Contains(got, "description") || !strings.Contains(got, "currency=eur") {
		t.Errorf("params = %s, want no order_id or description and currency=eur", got)
	}
}

func TestChargeRejectsBadRequestLocally(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	tests := map[string]func(*ChargeRequest){
		"empty key":       func(r *ChargeRequest) { r.IdempotencyKey = "" },
		"padded key":      func(r *ChargeRequest) { r.IdempotencyKey = " k " },
		"long key":        func(r *ChargeRequest) { r.IdempotencyKey = strings.Repeat("k", 256) },
		"empty messageID": func(r *ChargeRequest) { r.MessageID = "" },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			req := chargeRequest("evt_1")
			edit(&req)
			_, err := c.Charge(context.Background(), req)
			if e := paymentError(t, err); e.Class != ClassInvalid || e.HTTPStatus != 0 {
				t.Errorf("got %v, want a local invalid_request error", err)
			}
			if Classify(err) != ClassInvalid {
				t.Errorf("Classify = %s", Classify(err))
			}
		})
	}
	if st := sim.Stats(); st.Requests != 0 {
		t.Errorf("%d requests reached Stripe", st.Requests)
	}
}

func TestChargeDeclined(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	for pm, decline := range map[string]string{
		"pm_card_chargeDeclined":                  "generic_decline",
		"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
	} {
		req := chargeRequest("evt_" + pm)
		req.PaymentMethod = pm
		_, err := c.Charge(context.Background(), req)
		e := paymentError(t, err)
		if e.Class != ClassDeclined || e.HTTPStatus != 402 || e.Type != "card_error" || e.Code != "card_declined" ||
			e.DeclineCode != decline || !strings.HasPrefix(e.RequestID, "req_") || e.Message == "" {
			t.Errorf("%s: got %+v", pm, e)
		}
		if Classify(err) != ClassDeclined || Classify(err).Retryable() {
			t.Errorf("%s: Classify = %s", pm, Classify(err))
		}
		var se *stripe.Error
		if !errors.As(err, &se) || se.PaymentIntent == nil || se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
			t.Errorf("%s: the *stripe.Error with its PaymentIntent is not reachable", pm)
		}
		if !strings.Contains(err.Error(), "declined: 402 card_error card_declined ("+decline+")") {
			t.Errorf("%s: message %q", pm, err)
		}
	}
	if st := sim.Stats(); st.Charges != 0 || st.Declines != 2 {
		t.Errorf("stats = %+v, want 2 declines and no charge", st)
	}
}

func TestChargeInvalid(t *testing.T) {
	c, _ := newTestClient(t, Config{})
	for name, tt := range map[string]struct {
		edit  func(*ChargeRequest)
		param string
	}{
		"currency":       {func(r *ChargeRequest) { r.Currency = "xyz" }, "currency"},
		"amount":         {func(r *ChargeRequest) { r.Amount = 0 }, "amount"},
		"payment method": {func(r *ChargeRequest) { r.PaymentMethod = "pm_unknown" }, "payment_method"},
	} {
		req := chargeRequest("evt_1")
		tt.edit(&req)
		_, err := c.Charge(context.Background(), req)
		e := paymentError(t, err)
		if e.Class != ClassInvalid || e.HTTPStatus != 400 || e.Type != "invalid_request_error" {
			t.Errorf("%s: got %+v", name, e)
		}
		var se *stripe.Error
		if !errors.As(err, &se) || se.Param != tt.param {
			t.Errorf("%s: param = %q, want %q", name, se.Param, tt.param)
		}
	}
}

func TestIdempotencyMismatch(t *testing.T) {
	c, _ := newTestClient(t, Config{})
	req := chargeRequest("evt_1")
	if _, err := c.Charge(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	req.Amount++
	_, err := c.Charge(context.Background(), req)
	if e := paymentError(t, err); e.Class != ClassIdempotencyMismatch || e.HTTPStatus != 400 || Classify(err).Retryable() {
		t.Errorf("got %+v, want idempotency_mismatch", e)
	}
}

func TestServerErrorBeforeIsTransient(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: NoNetworkRetries})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultErrorBefore, Times: 1})

	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassTransient || e.HTTPStatus != 500 || !e.Class.Retryable() {
		t.Errorf("got %+v, want transient 500", e)
	}
	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil || ch.Replayed {
		t.Fatalf("retry: %v %+v, want a fresh success", err, ch)
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Errorf("charges = %d, want 1", st.Charges)
	}
}

func TestReplayed500IsAmbiguous(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultErrorAfter, Times: 1})

	// stripe-go does not retry a 500 to a POST, even with retries on.
	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassTransient || e.HTTPStatus != 500 {
		t.Fatalf("first attempt: %+v, want a transient 500", e)
	}
	_, err = c.Charge(context.Background(), chargeRequest("evt_1"))
	e := paymentError(t, err)
	if e.Class != ClassAmbiguous || e.HTTPStatus != 500 || Classify(err) != ClassAmbiguous || e.Class.Retryable() {
		t.Fatalf("retry: %+v, want ambiguous", e)
	}
	// Reconcile: the charge did happen.
	found, err := c.FindByMessageID(context.Background(), "evt_1")
	if err != nil || !found.Succeeded() {
		t.Fatalf("FindByMessageID: %v %+v", err, found)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 3 {
		t.Errorf("stats = %+v, want 1 charge in 3 requests", st)
	}
}

func TestLostResponseRecoveredByStripeGoRetry(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: 1})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultLostAfter, Times: 1})

	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if !ch.Succeeded() || !ch.Replayed {
		t.Errorf("charge = %+v, want the replayed success", ch)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 2 || st.Replays != 1 {
		t.Errorf("stats = %+v, want 1 charge in 2 requests", st)
	}
}

func TestLostResponseWithoutRetries(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: NoNetworkRetries})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultLostAfter, Times: 1})

	// The first request opens a fresh connection, so nothing retries it.
	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassTransient || e.HTTPStatus != 0 {
		t.Fatalf("got %+v, want a transient transport error", e)
	}
	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil || !ch.Replayed {
		t.Fatalf("retry: %v %+v, want the replayed success", err, ch)
	}
	if st := sim.Stats(); st.Charges != 1 {
		t.Errorf("charges = %d, want 1", st.Charges)
	}
}

// TestLostResponseOnReusedConnection documents that net/http itself resends
// a request carrying an Idempotency-Key when a reused keep-alive connection
// dies before the answer, whatever MaxNetworkRetries says.
func TestLostResponseOnReusedConnection(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: NoNetworkRetries})
	if _, err := c.Charge(context.Background(), chargeRequest("evt_warm")); err != nil {
		t.Fatal(err) // leaves an idle keep-alive connection in the pool
	}
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultLostAfter, Times: 1})

	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if !ch.Replayed {
		t.Errorf("charge = %+v, want the replayed success", ch)
	}
	if st := sim.Stats(); st.ChargesByMessage["evt_1"] != 1 || st.Replays != 1 {
		t.Errorf("stats = %+v, want evt_1 charged once and 1 replay", st)
	}
}

// waitForRequests waits until the simulator has received n API requests.
func waitForRequests(t *testing.T, sim *stripesim.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for sim.Stats().Requests < n {
		if time.Now().After(deadline) {
			t.Fatalf("the simulator never saw %d requests", n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestInFlight(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: NoNetworkRetries})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultDelay,
		Delay: 1500 * time.Millisecond, Times: 1})

	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = c.Charge(context.Background(), chargeRequest("evt_1")) })
	waitForRequests(t, sim, 1)
	time.Sleep(100 * time.Millisecond) // let it reserve the key

	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassInFlight || e.HTTPStatus != 409 || !e.Class.Retryable() {
		t.Errorf("got %+v, want in_flight 409", e)
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("first Charge: %v", firstErr)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Conflicts != 1 {
		t.Errorf("stats = %+v, want 1 charge and 1 conflict", st)
	}
}

// TestInFlightRetriedByStripeGo documents that stripe-go retries a 409
// itself, and so usually ends with the first request's replayed answer.
func TestInFlightRetriedByStripeGo(t *testing.T) {
	c, sim := newTestClient(t, Config{MaxNetworkRetries: 3})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultDelay,
		Delay: 400 * time.Millisecond, Times: 1})

	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Charge(context.Background(), chargeRequest("evt_1")); err != nil {
			t.Errorf("first Charge: %v", err)
		}
	})
	waitForRequests(t, sim, 1)
	time.Sleep(50 * time.Millisecond)

	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil || !ch.Replayed {
		t.Errorf("second Charge: %v %+v, want the replayed success", err, ch)
	}
	wg.Wait()
	if st := sim.Stats(); st.Charges != 1 || st.Conflicts < 1 {
		t.Errorf("stats = %+v, want 1 charge after a conflict", st)
	}
}

func TestRateLimited(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	sim.AddFault(stripesim.Fault{Kind: stripesim.FaultRateLimit, Times: 1})
	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassRateLimited || e.HTTPStatus != 429 || e.Code != "rate_limit" {
		t.Errorf("got %+v, want rate_limited 429", e)
	}
	if st := sim.Stats(); st.Requests != 1 {
		t.Errorf("requests = %d: stripe-go retried a rate_limit 429", st.Requests)
	}
}

// TestTooNearTheDeadlineSendsNothing: with less time left than the send
// margin, a charge, a create, a confirm and a refund are refused before
// Stripe sees them, as a transient *deadline.TooLateError.
func TestTooNearTheDeadlineSendsNothing(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the default margin is 2s
	defer cancel()
	_, errCharge := c.Charge(ctx, chargeRequest("evt_1"))
	_, errCreate := c.Create(ctx, chargeRequest("evt_2"))
	_, errConfirm := c.Confirm(ctx, "pi_1", "payment:evt_2")
	_, errRefund := c.Refund(ctx, RefundRequest{IdempotencyKey: "refund:evt_3", MessageID: "evt_3", PaymentIntentID: "pi_1", Amount: 100})
	for name, err := range map[string]error{"charge": errCharge, "create": errCreate, "confirm": errConfirm, "refund": errRefund} {
		if e := paymentError(t, err); e.Class != ClassTransient || !deadline.TooLate(err) {
			t.Errorf("%s: got %+v, want transient wrapping a TooLateError", name, e)
		}
	}
	if st := sim.Stats(); st.Requests != 0 {
		t.Errorf("stripe got %d requests too near their deadline", st.Requests)
	}
}

func TestContextDeadlineHonoured(t *testing.T) {
	// Retries on: the deadline stops them. No send margin: the request goes.
	c, sim := newTestClient(t, Config{SendMargin: -1})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultDelay, Delay: time.Second})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Charge(ctx, chargeRequest("evt_1"))
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Charge took %v with a 100ms deadline", elapsed)
	}
	if e := paymentError(t, err); e.Class != ClassTransient || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %+v, want transient wrapping context.DeadlineExceeded", e)
	}
	if st := sim.Stats(); st.Requests != 1 {
		t.Errorf("stats = %+v, want one request", st)
	}
	// Stripe goes on with the request it received: the charge is made and
	// its answer lost, for the key's retry to replay.
	waitForCharges(t, sim, 1)
}

// waitForCharges waits until the simulator made n charges.
func waitForCharges(t *testing.T, sim *stripesim.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for sim.Stats().Charges < n {
		if time.Now().After(deadline) {
			t.Fatalf("the simulator made %d charges, want %d", sim.Stats().Charges, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTimeoutIsPerRequest(t *testing.T) {
	c, sim := newTestClient(t, Config{Timeout: 150 * time.Millisecond, MaxNetworkRetries: 1})
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_1"}, Kind: stripesim.FaultDelay,
		Delay: 300 * time.Millisecond, Times: 1})

	// The first attempt times out at 150ms; Stripe goes on with it and
	// charges at 300ms, and stripe-go's retry, under the same key and at
	// least 500ms later, gets that charge's answer replayed.
	ch, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if err != nil || !ch.Succeeded() || !ch.Replayed {
		t.Fatalf("Charge: %v %+v; want the first attempt's charge replayed", err, ch)
	}
	if st := sim.Stats(); st.Charges != 1 || st.Requests != 2 {
		t.Errorf("stats = %+v, want 1 charge in 2 requests", st)
	}

	c2, sim2 := newTestClient(t, Config{Timeout: 100 * time.Millisecond, MaxNetworkRetries: NoNetworkRetries})
	sim2.AddFault(stripesim.Fault{Kind: stripesim.FaultDelay, Delay: time.Second})
	start := time.Now()
	_, err = c2.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassTransient || time.Since(start) > 3*time.Second {
		t.Errorf("got %+v after %v, want a quick transient timeout", e, time.Since(start))
	}
}

func TestFindByMessageID(t *testing.T) {
	c, _ := newTestClient(t, Config{})
	ctx := context.Background()

	declined := chargeRequest("evt_1")
	declined.IdempotencyKey = "first-try"
	declined.PaymentMethod = "pm_card_chargeDeclined"
	if _, err := c.Charge(ctx, declined); Classify(err) != ClassDeclined {
		t.Fatalf("decline: %v", err)
	}
	ok, err := c.Charge(ctx, chargeRequest("evt_1"))
	if err != nil {
		t.Fatal(err)
	}
	later := chargeRequest("evt_1")
	later.IdempotencyKey = "third-try"
	later.PaymentMethod = "pm_card_chargeDeclinedInsufficientFunds"
	if _, err := c.Charge(ctx, later); Classify(err) != ClassDeclined {
		t.Fatalf("decline: %v", err)
	}

	found, err := c.FindByMessageID(ctx, "evt_1")
	if err != nil {
		t.Fatalf("FindByMessageID: %v", err)
	}
	if found.PaymentIntentID != ok.PaymentIntentID || !found.Succeeded() || found.MessageID != "evt_1" || found.Replayed {
		t.Errorf("found %+v, want the succeeded %s", found, ok.PaymentIntentID)
	}

	_, err = c.FindByMessageID(ctx, "evt_none")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("missing message: %v, want ErrNotFound", err)
	}

	// Quotes and backslashes in message IDs are escaped in the query.
	odd := chargeRequest(`evt_'odd'\id`)
	if _, err := c.Charge(ctx, odd); err != nil {
		t.Fatal(err)
	}
	if found, err := c.FindByMessageID(ctx, odd.MessageID); err != nil || found.MessageID != odd.MessageID {
		t.Errorf("odd message ID: %v %+v", err, found)
	}

	_, err = c.FindByMessageID(ctx, "")
	if e := paymentError(t, err); e.Class != ClassInvalid {
		t.Errorf("empty message ID: %+v", e)
	}
}

func TestGet(t *testing.T) {
	c, _ := newTestClient(t, Config{})
	ctx := context.Background()
	ch, err := c.Charge(ctx, chargeRequest("evt_1"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, ch.PaymentIntentID)
	if err != nil || got.PaymentIntentID != ch.PaymentIntentID || got.ChargeID != ch.ChargeID || !got.Succeeded() {
		t.Errorf("Get: %v %+v", err, got)
	}

	_, err = c.Get(ctx, "pi_missing")
	if e := paymentError(t, err); e.Class != ClassInvalid || e.HTTPStatus != 404 || !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %+v, want a 404 matching ErrNotFound", e)
	}
	if _, err := c.Get(ctx, ""); Classify(err) != ClassInvalid {
		t.Errorf("empty ID: %v", err)
	}
}

func TestAuthenticationFailure(t *testing.T) {
	c, _ := newTestClient(t, Config{APIKey: "sk_live_wrong_key_for_the_simulator"})
	_, err := c.Charge(context.Background(), chargeRequest("evt_1"))
	if e := paymentError(t, err); e.Class != ClassInvalid || e.HTTPStatus != 401 {
		t.Errorf("got %+v, want invalid_request 401", e)
	}
	if strings.Contains(err.Error(), "sk_live_wrong_key_for_the_simulator") {
		t.Errorf("error reveals the key: %v", err)
	}
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	// A server that echoes the key verbatim, which Stripe does not do.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		//nolint:gosec // G705: this test server echoes the key on purpose
		fmt.Fprintf(w, `{"error":{"type":"authentication_error","message":"Invalid API Key provided: %s"}}`, key)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	c, err := New(Config{APIKey: testKey, BaseURL: srv.URL,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Charge(context.Background(), chargeRequest("evt_1"))
	e := paymentError(t, err)
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatal("no *stripe.Error")
	}
	for what, s := range map[string]string{"Error()": err.Error(), "Message": e.Message, "stripe.Error": se.Error(), "logs": logs.String()} {
		if strings.Contains(s, testKey) {
			t.Errorf("%s reveals the API key: %s", what, s)
		}
	}
	if !strings.Contains(e.Message, "[REDACTED]") || !strings.Contains(logs.String(), "[REDACTED]") {
		t.Errorf("message %q / logs %q not redacted as expected", e.Message, logs.String())
	}
}

func TestClientsAreIndependent(t *testing.T) {
	c1, sim1 := newTestClient(t, Config{})
	c2, sim2 := newTestClient(t, Config{})
	if _, err := c1.Charge(context.Background(), chargeRequest("evt_1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Charge(context.Background(), chargeRequest("evt_2")); err != nil {
		t.Fatal(err)
	}
	if a, b := sim1.Stats(), sim2.Stats(); a.ChargesByMessage["evt_1"] != 1 || b.ChargesByMessage["evt_2"] != 1 || a.Charges != 1 || b.Charges != 1 {
		t.Errorf("stats %+v / %+v: each client must reach its own simulator", a, b)
	}
}

func TestNewValidates(t *testing.T) {
	secret := "sk_test_do_not_print_me"
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{}, "APIKey"},
		{Config{APIKey: "pk_test_123"}, "APIKey"},
		{Config{APIKey: secret + " "}, "APIKey"},
		{Config{APIKey: secret, BaseURL: "localhost:12111"}, "BaseURL"},
		{Config{APIKey: secret, BaseURL: "ftp://example.com"}, "BaseURL"},
		{Config{APIKey: secret, BaseURL: "http://"}, "BaseURL"},
		{Config{APIKey: secret, BaseURL: "http://user:pw@example.com"}, "BaseURL"},
		{Config{APIKey: secret, Timeout: -time.Second}, "Timeout"},
		{Config{APIKey: secret, MaxNetworkRetries: -2}, "MaxNetworkRetries"},
		{Config{APIKey: secret, MaxNetworkRetries: 11}, "MaxNetworkRetries"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%v) = %v, want an invalid config error naming %s", tt.cfg, err, tt.field)
		}
		if err != nil && strings.Contains(err.Error(), "do_not_print_me") {
			t.Errorf("error reveals the key: %v", err)
		}
	}
	for _, cfg := range []Config{
		{APIKey: secret},
		{APIKey: "rk_live_abc", BaseURL: "https://api.stripe.com/", MaxNetworkRetries: NoNetworkRetries},
		{APIKey: secret, BaseURL: "http://127.0.0.1:12111", Timeout: time.Second, MaxNetworkRetries: 10,
			HTTPClient: &http.Client{Timeout: time.Minute}},
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%v): %v", cfg, err)
		}
	}
}

func TestNewCopiesHTTPClient(t *testing.T) {
	hc := &http.Client{Timeout: time.Minute}
	if _, err := New(Config{APIKey: testKey, HTTPClient: hc, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if hc.Timeout != time.Minute {
		t.Errorf("New changed the caller's HTTP client: timeout %v", hc.Timeout)
	}
}

func TestConfigRedactsKey(t *testing.T) {
	cfg := Config{APIKey: "sk_live_very_secret", BaseURL: "http://x"}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", cfg)
	for what, s := range map[string]string{
		"String": cfg.String(), "%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg), "slog": logs.String(),
	} {
		if strings.Contains(s, "very_secret") || !strings.Contains(s, "sk_live_[REDACTED]") {
			t.Errorf("%s = %s", what, s)
		}
	}
}

func TestClassify(t *testing.T) {
	replayedHeader := http.Header{"Idempotent-Replayed": {"true"}}
	stripeError := func(status int, typ stripe.ErrorType, code stripe.ErrorCode, h http.Header) error {
		se := &stripe.Error{HTTPStatusCode: status, Type: typ, Code: code}
		se.SetLastResponse(&stripe.APIResponse{Header: h, StatusCode: status})
		return se
	}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, ""},
		{"payment error", fmt.Errorf("wrapped: %w", &Error{Class: ClassAmbiguous}), ClassAmbiguous},
		{"card", stripeError(402, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined, nil), ClassDeclined},
		{"bad param", stripeError(400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterMissing, nil), ClassInvalid},
		{"auth", stripeError(401, "authentication_error", "", nil), ClassInvalid},
		{"forbidden", stripeError(403, stripe.ErrorTypeInvalidRequest, "", nil), ClassInvalid},
		{"missing", stripeError(404, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing, nil), ClassInvalid},
		{"mismatch", stripeError(400, stripe.ErrorTypeIdempotency, "", nil), ClassIdempotencyMismatch},
		{"in flight", stripeError(409, stripe.ErrorTypeIdempotency, stripe.ErrorCodeIdempotencyKeyInUse, nil), ClassInFlight},
		{"lock conflict", stripeError(409, stripe.ErrorTypeInvalidRequest, "", nil), ClassTransient},
		{"rate limit", stripeError(429, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeRateLimit, nil), ClassRateLimited},
		{"lock timeout", stripeError(429, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeLockTimeout, nil), ClassRateLimited},
		{"fresh 500", stripeError(500, stripe.ErrorTypeAPI, "", http.Header{}), ClassTransient},
		{"replayed 500", stripeError(500, stripe.ErrorTypeAPI, "", replayedHeader), ClassAmbiguous},
		{"503", stripeError(503, stripe.ErrorTypeAPI, "", nil), ClassTransient},
		{"not found", fmt.Errorf("x: %w", ErrNotFound), ClassInvalid},
		{"canceled", context.Canceled, ClassTransient},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), ClassTransient},
		{"url error", &netError{}, ClassTransient},
	}
	for _, tt := range tests {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// netError is a net.Error.
type netError struct{}

func (*netError) Error() string   { return "connection reset" }
func (*netError) Timeout() bool   { return false }
func (*netError) Temporary() bool { return true }

func TestErrorString(t *testing.T) {
	e := &Error{Class: ClassDeclined, HTTPStatus: 402, Type: "card_error", Code: "card_declined",
		DeclineCode: "insufficient_funds", Message: "Your card has insufficient funds.", RequestID: "req_1"}
	want := "declined: 402 card_error card_declined (insufficient_funds): Your card has insufficient funds. [req_1]"
	if got := e.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := localError("MessageID is required").Error(); got != "invalid_request: MessageID is required" {
		t.Errorf("local Error() = %q", got)
	}
}

// TestFindRefundReadsEveryPage: the message's refund is older than the
// 100 that follow it on its PaymentIntent, so it is on the list's second
// page; a lookup that stopped at the first would call it not found, and a
// retry past the key window would refund again.
func TestFindRefundReadsEveryPage(t *testing.T) {
	c, _ := newTestClient(t, Config{MaxNetworkRetries: NoNetworkRetries})
	ctx := context.Background()
	req := chargeRequest("evt_pages")
	req.Amount = 100000
	ch, err := c.Charge(ctx, req)
	if err != nil || !ch.Succeeded() {
		t.Fatalf("charge = %+v, %v", ch, err)
	}
	mine, err := c.Refund(ctx, RefundRequest{IdempotencyKey: "refund:evt_pages_0", MessageID: "evt_pages_0", PaymentIntentID: ch.PaymentIntentID, Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= refundsPage; i++ {
		id := fmt.Sprintf("evt_pages_%d", i)
		if _, err := c.Refund(ctx, RefundRequest{IdempotencyKey: "refund:" + id, MessageID: id, PaymentIntentID: ch.PaymentIntentID, Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	found, err := c.FindRefund(ctx, ch.PaymentIntentID, "evt_pages_0")
	if err != nil || found.ID != mine.ID {
		t.Fatalf("FindRefund = %+v, %v; want %s", found, err, mine.ID)
	}
	if _, err := c.FindRefund(ctx, ch.PaymentIntentID, "evt_pages_none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("FindRefund of a message with no refund: %v, want ErrNotFound", err)
	}
}
