package stripesim

import (
	"net/http"
	"testing"

	"github.com/stripe/stripe-go/v76"
)

// TestListUnknownCursor: a list page after a PaymentIntent that does not
// exist is Stripe's 404 resource_missing on starting_after (ending_before
// likewise), not the first page again.
func TestListUnknownCursor(t *testing.T) {
	_, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.New(chargeParams(k, "evt_"+k, 1000, "pm_card_visa")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ param, cursor string }{
		{"starting_after", "pi_doesnotexist"},
		{"ending_before", "pi_doesnotexist"},
		{"starting_after", "ch_notanintent"},
	} {
		p := &stripe.PaymentIntentListParams{}
		if tc.param == "starting_after" {
			p.StartingAfter = stripe.String(tc.cursor)
		} else {
			p.EndingBefore = stripe.String(tc.cursor)
		}
		it := c.List(p)
		n := 0
		for it.Next() {
			n++
		}
		if it.Err() == nil {
			t.Errorf("%s=%s: listed %d, want an error", tc.param, tc.cursor, n)
			continue
		}
		se := stripeErr(t, it.Err())
		if se.HTTPStatusCode != http.StatusNotFound || se.Code != stripe.ErrorCodeResourceMissing ||
			se.Param != tc.param || se.Msg != "No such payment_intent: '"+tc.cursor+"'" {
			t.Errorf("%s=%s: error %d %s param=%q %q, want 404 resource_missing on %s",
				tc.param, tc.cursor, se.HTTPStatusCode, se.Code, se.Param, se.Msg, tc.param)
		}
	}
}

// TestListCursorOutsideFilter: a cursor that exists but is not in the
// filtered list pages from its place in the order, as Stripe's cursors do.
func TestListCursorOutsideFilter(t *testing.T) {
	_, ts := newSim(t, Options{})
	c := newClient(t, ts, 0)
	var ids []string // oldest first
	for i, k := range []string{"a", "b", "c", "d"} {
		p := chargeParams(k, "evt_"+k, 1000, "pm_card_visa")
		if i%2 == 1 {
			p.Customer = stripe.String("cus_x")
		}
		pi, err := c.New(p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, pi.ID)
	}
	// Newest first, cus_x only: d, b. After c (not cus_x): b.
	p := &stripe.PaymentIntentListParams{Customer: stripe.String("cus_x")}
	p.StartingAfter = stripe.String(ids[2])
	it := c.List(p)
	var got []string
	for it.Next() {
		got = append(got, it.PaymentIntent().ID)
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	if len(got) != 1 || got[0] != ids[1] {
		t.Fatalf("after %s: %v, want [%s]", ids[2], got, ids[1])
	}
}
