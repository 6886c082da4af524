package stripesim

import (
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// TestStatusesOnDemand: each test payment method answers its status with a
// 200, and only succeeded counts as a charge.
func TestStatusesOnDemand(t *testing.T) {
	sim, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)
	for _, tc := range []struct {
		pm, status, code string
	}{
		{"pm_card_visa", "succeeded", ""},
		{"pm_card_processing", "processing", ""},
		{"pm_card_requiresPaymentMethod", "requires_payment_method", "card_declined"},
		{"pm_card_requiresCapture", "requires_capture", ""},
		{"pm_card_canceled", "canceled", ""},
	} {
		pi, err := c.New(chargeParams("k_"+tc.pm, "evt_"+tc.pm, 1000, tc.pm))
		if err != nil {
			t.Fatalf("%s: %v", tc.pm, err)
		}
		if string(pi.Status) != tc.status {
			t.Errorf("%s: status %s, want %s", tc.pm, pi.Status, tc.status)
		}
		if tc.code != "" && (pi.LastPaymentError == nil || string(pi.LastPaymentError.Code) != tc.code) {
			t.Errorf("%s: last_payment_error = %+v, want code %s", tc.pm, pi.LastPaymentError, tc.code)
		}
		if tc.status == "canceled" && pi.CancellationReason != "automatic" {
			t.Errorf("%s: cancellation_reason = %q", tc.pm, pi.CancellationReason)
		}
		if tc.status == "requires_action" && pi.NextAction == nil {
			t.Errorf("%s: no next_action", tc.pm)
		}
	}
	if st := sim.Stats(); st.Charges != 1 || st.Processing != 1 {
		t.Fatalf("charges = %d processing = %d, want 1 and 1", st.Charges, st.Processing)
	}
}

// TestAuthenticationRequired: a card that needs authentication answers
// requires_action with next_action on-session, and off-session, where no
// customer can authenticate, Stripe's 402 card_error authentication_required
// with the PaymentIntent back in requires_payment_method.
func TestAuthenticationRequired(t *testing.T) {
	_, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)
	on := chargeParams("k_on", "evt_on", 1000, "pm_card_authenticationRequired")
	on.OffSession = nil
	pi, err := c.New(on)
	if err != nil || pi.Status != "requires_action" || pi.NextAction == nil {
		t.Fatalf("on-session: %+v, %v; want requires_action with next_action", pi, err)
	}
	_, err = c.New(chargeParams("k_off", "evt_off", 1000, "pm_card_authenticationRequired"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 402 || se.Type != "card_error" || se.Code != "authentication_required" ||
		se.PaymentIntent == nil || se.PaymentIntent.Status != "requires_payment_method" {
		t.Fatalf("off-session: %+v; want a 402 card_error authentication_required, the PaymentIntent requires_payment_method", se)
	}
}

// TestProcessingSettles: a processing PaymentIntent settles when told to,
// or by itself after ProcessingDelay; confirming it again is refused.
func TestProcessingSettles(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	sim, ts := newSim(t, Options{Now: func() time.Time { return now }, ProcessingDelay: time.Hour})
	c := newClient(t, ts, 0)
	ok, err := c.New(chargeParams("a", "evt_a", 1000, "pm_card_processing"))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.New(chargeParams("b", "evt_b", 1000, "pm_card_processingDeclined"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Confirm(ok.ID, &stripe.PaymentIntentConfirmParams{}); err == nil {
		t.Error("a processing PaymentIntent was confirmed again")
	}
	if err := sim.SettleProcessing(ok.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := sim.SettleProcessing(ok.ID, true); err == nil {
		t.Error("settled twice")
	}
	got, err := c.Get(ok.ID, nil)
	if err != nil || got.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("settled = %v, %v", got.Status, err)
	}
	if got, _ := c.Get(bad.ID, nil); got.Status != stripe.PaymentIntentStatusProcessing {
		t.Fatalf("before the delay: %s", got.Status)
	}
	now = now.Add(time.Hour)
	got, err = c.Get(bad.ID, nil)
	if err != nil || got.Status != stripe.PaymentIntentStatusRequiresPaymentMethod || got.LastPaymentError == nil {
		t.Fatalf("after the delay = %+v, %v; want failed", got, err)
	}
	if st := sim.Stats(); st.ChargesByMessage["evt_a"] != 1 || st.ChargesByMessage["evt_b"] != 0 {
		t.Fatalf("charges = %v", st.ChargesByMessage)
	}
}

// TestSearchLagListIsImmediate: Search misses a new PaymentIntent until the
// lag has passed; retrieve and list see it at once.
func TestSearchLagListIsImmediate(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	_, ts := newSim(t, Options{Now: func() time.Time { return now }})
	c := newClient(t, ts, 0)
	pi, err := c.New(chargeParams("a", "evt_lag", 1000, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	search := func() int {
		it := c.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: "metadata['message_id']:'evt_lag'"}})
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		return n
	}
	if n := search(); n != 0 {
		t.Fatalf("search saw %d within the lag", n)
	}
	list := func(gte, lte int64) []string {
		p := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: gte, LesserThanOrEqual: lte}}
		p.Limit = stripe.Int64(1)
		it := c.List(p)
		var ids []string
		for it.Next() {
			ids = append(ids, it.PaymentIntent().ID)
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
		return ids
	}
	if ids := list(now.Unix()-10, now.Unix()+10); len(ids) != 1 || ids[0] != pi.ID {
		t.Fatalf("list = %v, want [%s]", ids, pi.ID)
	}
	if ids := list(now.Unix()+1, now.Unix()+10); len(ids) != 0 {
		t.Fatalf("list outside the window = %v", ids)
	}
	// Pages: three more, listed one per page, newest first.
	for _, k := range []string{"b", "c", "d"} {
		if _, err := c.New(chargeParams(k, "evt_"+k, 1000, "pm_card_visa")); err != nil {
			t.Fatal(err)
		}
	}
	if ids := list(now.Unix(), now.Unix()); len(ids) != 4 || ids[3] != pi.ID || !strings.HasPrefix(ids[0], "pi_") {
		t.Fatalf("paged list = %v", ids)
	}
	now = now.Add(DefaultSearchLag)
	if n := search(); n != 1 {
		t.Fatalf("search after the lag = %d, want 1", n)
	}
}
