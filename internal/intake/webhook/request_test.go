package webhook_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
)

// wantNotPaid checks that message id's payment is still in state want, its
// order not paid, no processed row, no order.paid event, no signal, and
// that event eventID was kept as an anomaly.
func (e *env) wantNotPaid(id string, orderID int64, want store.PaymentState, eventID string) {
	e.t.Helper()
	if got := e.payment(id); got.State != want {
		e.t.Fatalf("payment %+v after %s, want still %s", got, eventID, want)
	}
	if n := e.rows(`SELECT count(*) FROM orders WHERE id = $1 AND status = 'paid'`, orderID); n != 0 {
		e.t.Fatalf("order %d paid by %s", orderID, eventID)
	}
	if n := e.rows(`SELECT count(*) FROM processed_messages WHERE message_id = $1`, id); n != 0 {
		e.t.Fatalf("%d processed rows for %s after %s, want 0", n, id, eventID)
	}
	if n := e.rows(`SELECT count(*) FROM outbox WHERE event_id = $1`, store.OrderPaidEventID(id)); n != 0 {
		e.t.Fatalf("order.paid emitted for %s by %s", id, eventID)
	}
	if n := e.rows(`SELECT count(*) FROM payment_anomalies WHERE event_id = $1 AND message_id = $2`, eventID, id); n != 1 {
		e.t.Fatalf("%s not kept as an anomaly of %s", eventID, id)
	}
	if s := e.sig.all(); len(s) != 0 {
		e.t.Fatalf("signals %+v, want none", s)
	}
}

// A lookup found a PaymentIntent naming the message but of another amount:
// the payment is recorded unexpected with that PaymentIntent's ID. Its
// payment_intent.succeeded must not settle it as paid; nor may any other
// event: an unexpected payment is an operator's to settle.
func TestStripeEventNeverSettlesAnUnexpectedPayment(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	ctx := context.Background()
	e.claim("m7", 7) // 1200 usd
	if _, err := e.st.RecordPaymentUnexpected(ctx, store.PaymentOpen{
		Consumer: message.ConsumerOrderPlaced, MessageID: "m7", Key: "payment:m7", Claim: 1,
		PaymentIntentID: "pi_7", StripeStatus: "succeeded", Reason: "payment intent pi_7 differs from the request: amount 2999, want 1200",
	}); err != nil {
		t.Fatal(err)
	}
	other := stripeEvent("evt_s7", "payment_intent.succeeded", "pi_7", "succeeded", "m7", map[string]any{"amount": 2999, "currency": "usd"})
	wantStatus(t, e.sendStripe(other), http.StatusOK)
	e.wantNotPaid("m7", 7, store.PaymentUnexpected, "evt_s7")

	same := stripeEvent("evt_s7b", "payment_intent.succeeded", "pi_7", "succeeded", "m7", map[string]any{"amount": 1200, "currency": "usd"})
	wantStatus(t, e.sendStripe(same), http.StatusOK)
	e.wantNotPaid("m7", 7, store.PaymentUnexpected, "evt_s7b")
}

// A PaymentIntent ID already recorded (processing) does not exempt its
// events from the request: one of another amount, currency or payment
// method is an anomaly, not a settlement.
func TestStripeEventOfARecordedIntentMustMatchTheRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
	}{
		{"amount", map[string]any{"amount": 5000, "currency": "usd"}},
		{"currency", map[string]any{"amount": 1200, "currency": "eur"}},
		{"payment method", map[string]any{"amount": 1200, "currency": "usd", "payment_method": "pm_someone_else"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, webhook.Config{})
			ctx := context.Background()
			e.claim("m8", 8)
			e.inbox("m8", 8, "pm_1Real")
			if _, err := e.st.RecordPaymentProcessing(ctx, store.PaymentOpen{
				Consumer: message.ConsumerOrderPlaced, MessageID: "m8", Key: "payment:m8", Claim: 1,
				PaymentIntentID: "pi_8", StripeStatus: "processing",
			}); err != nil {
				t.Fatal(err)
			}
			ev := stripeEvent("evt_s8", "payment_intent.succeeded", "pi_8", "succeeded", "m8", tc.extra)
			wantStatus(t, e.sendStripe(ev), http.StatusOK)
			e.wantNotPaid("m8", 8, store.PaymentProcessing, "evt_s8")

			ours := stripeEvent("evt_s8ok", "payment_intent.succeeded", "pi_8", "succeeded", "m8",
				map[string]any{"amount": 1200, "currency": "usd", "payment_method": "pm_1Real"})
			wantStatus(t, e.sendStripe(ours), http.StatusOK)
			if got := e.payment("m8"); got.State != store.PaymentSucceeded {
				t.Fatalf("payment %+v after the request's own PaymentIntent, want succeeded", got)
			}
		})
	}
}

// A test alias (pm_card_visa) comes back from Stripe as a new PaymentMethod
// ID; the PaymentIntent's metadata keeps the alias, which is what matches.
func TestStripeEventOfATestAliasMatchesThroughMetadata(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m9", 9)
	e.inbox("m9", 9, "pm_card_visa")
	md := map[string]any{"message_id": "m9", "effectively_test_payment_method": "pm_card_visa"}
	ev := stripeEvent("evt_s9", "payment_intent.succeeded", "pi_9", "succeeded", "m9",
		map[string]any{"amount": 1200, "currency": "usd", "payment_method": "pm_1Resolved", "metadata": md})
	wantStatus(t, e.sendStripe(ev), http.StatusOK)
	if got := e.payment("m9"); got.State != store.PaymentSucceeded {
		t.Fatalf("payment %+v, want succeeded", got)
	}
}

// A worker whose configured namespace is not the one recorded in the
// database (the start guard refuses that; the ledger holds the line too)
// never applies an event of the other namespace.
func TestStripeEventOfAnotherRecordedNamespaceNotApplied(t *testing.T) {
	e := newEnv(t, webhook.Config{Namespace: "eu"})
	if _, err := e.st.Pool().Exec(context.Background(), `INSERT INTO deployment (name, value) VALUES ('key_namespace', 'us')`); err != nil {
		t.Fatal(err)
	}
	e.claim("m10", 10)
	ev := stripeEvent("evt_s10", "payment_intent.succeeded", "pi_10", "succeeded", "m10",
		map[string]any{"amount": 1200, "currency": "usd", "metadata": nsMetadata("m10", "eu")})
	wantStatus(t, e.sendStripe(ev), http.StatusOK)
	if got := e.payment("m10"); got.State != store.PaymentClaimed {
		t.Fatalf("payment %+v after an event of namespace eu in a database of us, want claimed", got)
	}
	if !strings.Contains(e.logs.String(), "another key namespace") {
		t.Fatalf("no warning for the foreign event: %s", e.logs.String())
	}
}

// inbox records message id's order.placed message with payment method pm,
// as intake does.
func (e *env) inbox(id string, orderID int64, pm string) {
	e.t.Helper()
	payload := `{"id":"` + id + `","type":"order.placed","data":{"order_id":` + strconv.FormatInt(orderID, 10) +
		`,"amount":1200,"currency":"usd","customer_email":"a@example.com","payment_method":"` + pm + `"}}`
	if _, err := e.st.Pool().Exec(context.Background(), `
		INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source, state)
		VALUES ($1, $2, $3, 'x', 'test', 'dispatched')`, message.ConsumerOrderPlaced, id, []byte(payload)); err != nil {
		e.t.Fatal(err)
	}
}

// A copy of an event kept as an anomaly, arriving after the payment's own
// PaymentIntent settled it, does not signal the workflow with the other
// PaymentIntent.
func TestStripeCopyOfAnAnomalySignalsNothing(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m11", 11)
	other := stripeEvent("evt_s11a", "payment_intent.succeeded", "pi_11a", "succeeded", "m11", map[string]any{"amount": 9999, "currency": "usd"})
	wantStatus(t, e.sendStripe(other), http.StatusOK)
	ours := stripeEvent("evt_s11b", "payment_intent.succeeded", "pi_11b", "succeeded", "m11", map[string]any{"amount": 1200, "currency": "usd"})
	wantStatus(t, e.sendStripe(ours), http.StatusOK)
	wantStatus(t, e.sendStripe(other), http.StatusOK)
	if s := e.sig.all(); len(s) != 1 || s[0].Arg.PaymentIntentID != "pi_11b" {
		t.Fatalf("signals %+v, want one, for pi_11b", s)
	}
}
