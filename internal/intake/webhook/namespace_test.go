package webhook_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
)

// nsMetadata is the metadata a Client of key namespace ns gives an object
// for message msg.
func nsMetadata(msg, ns string) map[string]any {
	md := map[string]any{"message_id": msg}
	if ns != "" {
		md["effectively_namespace"] = ns
	}
	return md
}

// A shared Stripe account sends "eu"'s events to "us"'s endpoint too: for
// the same message ID they must neither settle "us"'s payment nor be
// recorded; "us"'s own event settles it.
func TestStripeEventOfAnotherNamespaceIgnored(t *testing.T) {
	for _, ours := range []string{"us", ""} {
		t.Run("namespace="+ours, func(t *testing.T) {
			e := newEnv(t, webhook.Config{Namespace: ours})
			e.claim("m6", 6)
			foreign := stripeEvent("evt_eu6", "payment_intent.succeeded", "pi_eu6", "succeeded", "m6",
				map[string]any{"metadata": nsMetadata("m6", "eu")})
			wantStatus(t, e.sendStripe(foreign), http.StatusOK)
			refund, _ := json.Marshal(map[string]any{
				"id": "evt_eur6", "object": "event", "api_version": stripe.APIVersion, "type": "charge.refunded",
				"data": map[string]any{"object": map[string]any{"id": "ch_eu6", "object": "charge", "payment_intent": "pi_eu6",
					"amount_refunded": 1200, "currency": "usd", "refunded": true, "metadata": nsMetadata("m6", "eu")}},
			})
			wantStatus(t, e.sendStripe(refund), http.StatusOK)
			if got := e.payment("m6"); got.State != store.PaymentClaimed || got.PaymentIntentID != "" {
				t.Fatalf("payment %+v after another namespace's events, want claimed without a PaymentIntent", got)
			}
			if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'stripe-events'`); n != 0 {
				t.Fatalf("%d inbox rows for another namespace's events, want 0", n)
			}
			if n := e.rows(`SELECT count(*) FROM stripe_refunds`); n != 0 {
				t.Fatalf("another namespace's refund recorded")
			}
			if s := e.sig.all(); len(s) != 0 {
				t.Fatalf("signals %+v for another namespace's event", s)
			}
			if f, a := e.count("stripe", "foreign"), e.count("stripe", "accepted"); f != 2 || a != 0 {
				t.Fatalf("foreign %d accepted %d, want 2 and 0", f, a)
			}

			own := stripeEvent("evt_us6", "payment_intent.succeeded", "pi_us6", "succeeded", "m6",
				map[string]any{"metadata": nsMetadata("m6", ours)})
			wantStatus(t, e.sendStripe(own), http.StatusOK)
			if got := e.payment("m6"); got.State != store.PaymentSucceeded || got.PaymentIntentID != "pi_us6" {
				t.Fatalf("payment %+v after its own event, want succeeded pi_us6", got)
			}
			if e.count("stripe", "accepted") != 1 {
				t.Fatal("own event not accepted")
			}
		})
	}
}

// A shared SendGrid account: "eu"'s event for the same key neither moves
// "us"'s receipt nor is recorded, alone or in a batch with "us"'s own.
func TestSendGridEventOfAnotherNamespaceIgnored(t *testing.T) {
	e, post := sendgridEnvWith(t, webhook.Config{Namespace: "us"})
	e.claimEmail("r7", 27, store.AtLeastOnce)
	withNS := func(ev map[string]any, ns string) map[string]any {
		ev["effectively_namespace"] = ns
		return ev
	}
	bounce := withNS(sgEvent("sg71", "bounce", "email:r7"), "eu")
	wantStatus(t, post(sgBatch(bounce), time.Now()), http.StatusOK)
	if got := e.receipt(27); got == store.ReceiptBounced {
		t.Fatal("another namespace's bounce moved the receipt")
	}
	unscoped := sgEvent("sg72", "bounce", "email:r7") // a deployment without a namespace
	delivered := withNS(sgEvent("sg73", "delivered", "email:r7"), "us")
	wantStatus(t, post(sgBatch(unscoped, delivered), time.Now()), http.StatusOK)
	if got := e.receipt(27); got != store.ReceiptDelivered {
		t.Fatalf("receipt %s, want delivered by its own event", got)
	}
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'sendgrid-events'`); n != 1 {
		t.Fatalf("%d sendgrid inbox rows, want 1 (sg73 only)", n)
	}
	if f, a := e.count("sendgrid", "foreign"), e.count("sendgrid", "accepted"); f != 1 || a != 1 {
		t.Fatalf("foreign %d accepted %d, want 1 and 1", f, a)
	}
}

func TestNamespaceValidated(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	_, err := webhook.New(e.st, e.sig, nil, webhook.Config{StripeSecrets: []string{secretNew}, Namespace: "e/u"})
	if err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_KEY_NAMESPACE") {
		t.Fatalf("webhook.New with namespace e/u: %v, want an error naming EFFECTIVELY_KEY_NAMESPACE", err)
	}
}
