package stripesim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	striperefund "github.com/stripe/stripe-go/v76/refund"
)

// refundClient is a stripe-go Refunds client for the simulator.
func refundClient(t *testing.T, ts *httptest.Server) striperefund.Client {
	t.Helper()
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(ts.URL),
		HTTPClient:        &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	return striperefund.Client{B: backend, Key: testKey}
}

func refundParamsFor(pi, key, messageID string, amount int64) *stripe.RefundParams {
	p := &stripe.RefundParams{PaymentIntent: stripe.String(pi), Amount: stripe.Int64(amount), Reason: stripe.String("requested_by_customer")}
	p.AddMetadata("message_id", messageID)
	p.SetIdempotencyKey(key)
	return p
}

// paidIntent charges 1500 and returns the PaymentIntent's ID.
func paidIntent(t *testing.T, ts *httptest.Server, messageID string) string {
	t.Helper()
	pi, err := newClient(t, ts, 0).New(chargeParams("payment:"+messageID, messageID, 1500, "pm_card_visa"))
	if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("charge = %+v, %v", pi, err)
	}
	return pi.ID
}

func TestRefundIdempotency(t *testing.T) {
	sim, ts := newSim(t, Options{})
	rc := refundClient(t, ts)
	pi := paidIntent(t, ts, "evt_1")

	first, err := rc.New(refundParamsFor(pi, "refund:evt_r1", "evt_r1", 500))
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != stripe.RefundStatusSucceeded || first.Amount != 500 || first.PaymentIntent.ID != pi || first.Currency != "usd" {
		t.Errorf("refund = %+v", first)
	}
	// The same key and parameters: replayed, not refunded again.
	again, err := rc.New(refundParamsFor(pi, "refund:evt_r1", "evt_r1", 500))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !replayed(again.LastResponse.Header) {
		t.Errorf("repeat = %s (replayed %v), want %s replayed", again.ID, replayed(again.LastResponse.Header), first.ID)
	}
	// The same key, other parameters: refused.
	_, err = rc.New(refundParamsFor(pi, "refund:evt_r1", "evt_r1", 600))
	if se := stripeErr(t, err); se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != http.StatusBadRequest {
		t.Errorf("different parameters = %+v", se)
	}
	st := sim.Stats()
	if st.Refunds != 1 || st.RefundsByMessage["evt_r1"] != 1 || st.RefundedAmount != 500 || st.Replays != 1 || st.IdempotencyErrors != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRefundNeverExceedsTheCharge(t *testing.T) {
	sim, ts := newSim(t, Options{})
	rc := refundClient(t, ts)
	pi := paidIntent(t, ts, "evt_1")

	if _, err := rc.New(refundParamsFor(pi, "refund:a", "a", 1000)); err != nil {
		t.Fatal(err)
	}
	// 600 more would make 1600 of 1500.
	_, err := rc.New(refundParamsFor(pi, "refund:b", "b", 600))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != http.StatusBadRequest || se.Code != codeAmountTooLarge {
		t.Errorf("over-refund = %d %s %q", se.HTTPStatusCode, se.Code, se.Msg)
	}
	// The refusal is saved under its key, like Stripe's.
	_, err = rc.New(refundParamsFor(pi, "refund:b", "b", 600))
	if se := stripeErr(t, err); se.Code != codeAmountTooLarge || !replayed(se.LastResponse.Header) {
		t.Errorf("repeat of the refusal = %+v", se)
	}
	if _, err := rc.New(refundParamsFor(pi, "refund:c", "c", 500)); err != nil {
		t.Fatalf("the last 500: %v", err)
	}
	_, err = rc.New(refundParamsFor(pi, "refund:d", "d", 1))
	if se := stripeErr(t, err); se.Code != codeChargeAlreadyRefunded {
		t.Errorf("refund of a fully refunded charge = %+v", se)
	}
	if st := sim.Stats(); st.RefundedAmount != 1500 || st.Refunds != 2 || st.RefundsRefused != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRefundOfUnpaidIntent(t *testing.T) {
	_, ts := newSim(t, Options{})
	rc := refundClient(t, ts)
	_, err := newClient(t, ts, 0).New(chargeParams("payment:x", "x", 1500, "pm_card_chargeDeclined"))
	se := stripeErr(t, err)
	_, err = rc.New(refundParamsFor(se.PaymentIntent.ID, "refund:x", "x", 100))
	if se := stripeErr(t, err); se.Code != codeChargeNotRefundable {
		t.Errorf("refund of a declined intent = %+v", se)
	}
	_, err = rc.New(refundParamsFor("pi_nope", "refund:y", "y", 100))
	if se := stripeErr(t, err); se.HTTPStatusCode != http.StatusNotFound {
		t.Errorf("refund of a missing intent = %+v", se)
	}
}

func TestRefundListAndRetrieve(t *testing.T) {
	_, ts := newSim(t, Options{})
	rc := refundClient(t, ts)
	pi := paidIntent(t, ts, "evt_1")
	other := paidIntent(t, ts, "evt_2")
	r1, err := rc.New(refundParamsFor(pi, "refund:a", "a", 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.New(refundParamsFor(other, "refund:b", "b", 100)); err != nil {
		t.Fatal(err)
	}
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(pi)}
	params.Context = context.Background()
	var ids []string
	it := rc.List(params)
	for it.Next() {
		ids = append(ids, it.Refund().ID)
	}
	if err := it.Err(); err != nil || len(ids) != 1 || ids[0] != r1.ID {
		t.Errorf("list of %s = %v, %v; want [%s]", pi, ids, err, r1.ID)
	}
	got, err := rc.Get(r1.ID, nil)
	if err != nil || got.ID != r1.ID || got.Metadata["message_id"] != "a" {
		t.Errorf("retrieve = %+v, %v", got, err)
	}
	if _, err := rc.Get("re_nope", nil); stripeErr(t, err).HTTPStatusCode != http.StatusNotFound {
		t.Errorf("retrieve of a missing refund = %v", err)
	}
}
