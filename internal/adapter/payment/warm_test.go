package payment

import (
	"encoding/json"
	"testing"

	"github.com/stripe/stripe-go/v76"
)

// Warm sends nothing, and its answers are ones the Client reads as Stripe's:
// a body that stripe-go could not decode, or that read as something else,
// would warm nothing of the path a charge takes.
func TestWarmSendsNothingAndDecodesStripesShapes(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	if err := c.Warm(); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Fatalf("Warm sent %d requests, want none", n)
	}

	var pi stripe.PaymentIntent
	if err := json.Unmarshal([]byte(warmIntent), &pi); err != nil {
		t.Fatal(err)
	}
	if ch := toCharge(&pi); ch.PaymentIntentID != "pi_warm" || ch.Status != "succeeded" || ch.ChargeID != "ch_warm" || ch.MessageID != "warm" {
		t.Errorf("the warm PaymentIntent reads as %+v", ch)
	}
	var re stripe.Refund
	if err := json.Unmarshal([]byte(warmRefund), &re); err != nil {
		t.Fatal(err)
	}
	if r := toRefund(&re); r.ID != "re_warm" || r.Status != "succeeded" || r.PaymentIntentID != "pi_warm" || r.MessageID != "warm" {
		t.Errorf("the warm Refund reads as %+v", r)
	}
}
