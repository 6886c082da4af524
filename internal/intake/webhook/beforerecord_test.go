package webhook_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
)

// A payment_intent.succeeded that comes before the activity's record finds
// a claimed payment with no PaymentIntent ID (the ID is recorded with the
// outcome) by metadata.message_id. A PaymentIntent that names the message
// but differs in amount or currency is not the payment: kept as an anomaly,
// the payment stays claimed and no workflow is told it is paid. The
// PaymentIntent of the payment's amount and currency then settles it.
func TestStripeEventBeforeTheRecordMustMatchTheAmount(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m6", 6) // 1200 usd, no PaymentIntent ID
	other := stripeEvent("evt_s6a", "payment_intent.succeeded", "pi_6a", "succeeded", "m6", map[string]any{"amount": 9999, "currency": "usd"})
	wantStatus(t, e.sendStripe(other), http.StatusOK)
	otherCurrency := stripeEvent("evt_s6b", "payment_intent.succeeded", "pi_6b", "succeeded", "m6", map[string]any{"amount": 1200, "currency": "eur"})
	wantStatus(t, e.sendStripe(otherCurrency), http.StatusOK)
	if got := e.payment("m6"); got.State != store.PaymentClaimed || got.PaymentIntentID != "" {
		t.Fatalf("payment %+v after PaymentIntents of another amount and currency, want still claimed without an ID", got)
	}
	if n := e.rows(`SELECT count(*) FROM payment_anomalies WHERE event_id IN ('evt_s6a', 'evt_s6b') AND message_id = 'm6'`); n != 2 {
		t.Fatalf("%d anomalies, want 2", n)
	}
	if sent := e.sig.all(); len(sent) != 0 {
		t.Fatalf("signals %+v, want none", sent)
	}

	ours := stripeEvent("evt_s6c", "payment_intent.succeeded", "pi_6c", "succeeded", "m6", map[string]any{"amount": 1200, "currency": "usd"})
	wantStatus(t, e.sendStripe(ours), http.StatusOK)
	if got := e.payment("m6"); got.State != store.PaymentSucceeded || got.PaymentIntentID != "pi_6c" {
		t.Fatalf("payment %+v, want succeeded with pi_6c", got)
	}
	eff, err := e.st.Effect(context.Background(), "payment:m6")
	if err != nil || eff.State != store.StateSucceeded || eff.ProviderRef != "pi_6c" {
		t.Fatalf("effect %+v, %v; want succeeded/pi_6c", eff, err)
	}
	if sent := e.sig.all(); len(sent) != 1 || sent[0].Arg.PaymentIntentID != "pi_6c" {
		t.Fatalf("signals %+v, want one for pi_6c", sent)
	}
}
