package payment

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCreateConfirmAndFindInWindow(t *testing.T) {
	c, sim := newTestClient(t, Config{})
	ctx := context.Background()
	req := ChargeRequest{IdempotencyKey: "paymentintent:evt_w", MessageID: "evt_w", OrderID: 3, Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa"}
	created, err := c.Create(ctx, req)
	if err != nil || created.Status != "requires_confirmation" {
		t.Fatalf("create = %+v, %v", created, err)
	}
	if v, _, _ := created.Verdict(); v != VerdictUnconfirmed {
		t.Fatalf("verdict of a created payment intent = %s", v)
	}
	if again, err := c.Create(ctx, req); err != nil || again.PaymentIntentID != created.PaymentIntentID || !again.Replayed {
		t.Fatalf("create again = %+v, %v; want the same payment intent, replayed", again, err)
	}
	if sim.Stats().Charges != 0 {
		t.Fatal("create charged")
	}
	ch, err := c.Confirm(ctx, created.PaymentIntentID, "payment:evt_w")
	if err != nil || !ch.Succeeded() {
		t.Fatalf("confirm = %+v, %v", ch, err)
	}
	now := time.Now()
	found, err := c.FindInWindow(ctx, "evt_w", now.Add(-time.Minute), now.Add(time.Minute))
	if err != nil || found.PaymentIntentID != created.PaymentIntentID || !found.Succeeded() {
		t.Fatalf("find in window = %+v, %v", found, err)
	}
	if _, err := c.FindInWindow(ctx, "evt_w", now.Add(time.Hour), now.Add(2*time.Hour)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("find outside the window: %v, want ErrNotFound", err)
	}
	if _, err := c.FindInWindow(ctx, "evt_other", now.Add(-time.Minute), now.Add(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("find another message: %v, want ErrNotFound", err)
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		ch            Charge
		want          Verdict
		code, decline string
	}{
		{Charge{Status: "succeeded"}, VerdictPaid, "", ""},
		{Charge{Status: "processing"}, VerdictProcessing, "", ""},
		{Charge{Status: "requires_payment_method", FailureCode: "card_declined", DeclineCode: "generic_decline"}, VerdictFailed, "card_declined", "generic_decline"},
		{Charge{Status: "requires_payment_method"}, VerdictFailed, "requires_payment_method", ""},
		{Charge{Status: "canceled", CancellationReason: "fraudulent"}, VerdictFailed, "fraudulent", ""},
		{Charge{Status: "requires_action"}, VerdictFailed, CodeAuthenticationRequired, ""},
		{Charge{Status: "requires_confirmation"}, VerdictUnconfirmed, "", ""},
		{Charge{Status: "requires_capture"}, VerdictUnexpected, "", ""},
		{Charge{Status: "something_new"}, VerdictUnexpected, "", ""},
	} {
		v, code, decline := tc.ch.Verdict()
		if v != tc.want || code != tc.code || decline != tc.decline {
			t.Errorf("%s: %s %q %q, want %s %q %q", tc.ch.Status, v, code, decline, tc.want, tc.code, tc.decline)
		}
	}
}

func TestDiffers(t *testing.T) {
	pi := &Charge{Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa"}
	for _, tc := range []struct {
		amount       int64
		currency, pm string
		want         string
	}{
		{1999, "usd", "pm_card_visa", ""},
		{1999, "USD", "pm_card_visa", ""},
		{1999, "usd", "", ""},
		{2999, "usd", "pm_card_visa", "amount 1999, want 2999"},
		{1999, "eur", "pm_card_visa", `currency "usd", want "eur"`},
		{1999, "usd", "pm_card_mastercard", "payment_method differs"},
		{5, "EUR", "pm_x", `amount 1999, want 5; currency "usd", want "eur"; payment_method differs`},
	} {
		if got := pi.Differs(tc.amount, tc.currency, tc.pm); got != tc.want {
			t.Errorf("Differs(%d, %q, %q) = %q, want %q", tc.amount, tc.currency, tc.pm, got, tc.want)
		}
	}
	detached := &Charge{Amount: 1999, Currency: "usd"}
	if got := detached.Differs(1999, "usd", "pm_card_visa"); got != "" {
		t.Errorf("a payment intent without a payment method differs: %q", got)
	}
}

// TestDiffersComparesTestAliasesThroughMetadata: Stripe resolves a test
// alias (pm_card_visa) into a new PaymentMethod ID on the PaymentIntent, so
// a lookup compares the alias with the one its metadata says was asked for;
// a real PaymentMethod ID matches only itself.
func TestDiffersComparesTestAliasesThroughMetadata(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		onIntent, asked, req string
		differs              bool
	}{
		{"alias resolved, same alias asked", "pm_1Abc", "pm_card_visa", "pm_card_visa", false},
		{"alias resolved, another alias asked", "pm_1Abc", "pm_card_mastercard", "pm_card_visa", true},
		{"alias resolved, nothing asked", "pm_1Abc", "", "pm_card_visa", true},
		{"real method, same", "pm_1Real", "", "pm_1Real", false},
		{"real method, another", "pm_1Other", "", "pm_1Real", true},
		{"real method requested, metadata names it", "pm_1Other", "pm_1Real", "pm_1Real", true},
		{"detached", "", "", "pm_card_visa", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Charge{Amount: 100, Currency: "usd", PaymentMethod: tc.onIntent, RequestedTestPaymentMethod: tc.asked}
			if got := c.Differs(100, "USD", tc.req) != ""; got != tc.differs {
				t.Fatalf("Differs = %q, want differs %v", c.Differs(100, "USD", tc.req), tc.differs)
			}
		})
	}
}
