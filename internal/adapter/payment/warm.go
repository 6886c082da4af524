package payment

import (
	"encoding/json"
	"fmt"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/form"
)

// Warm encodes each request the Client sends and decodes an answer of each
// kind it reads, so that a process's first charge and refund do not pay
// for building stripe-go's and encoding/json's per-type caches (a fresh
// process's first charge took 22–29 ms against the simulator, 6–9 ms after
// Warm), while a backlog's first messages and every other route's arrive at
// once after an outage. Nothing is sent.
// The worker calls it before it answers /readyz.
func (c *Client) Warm() error {
	req := ChargeRequest{IdempotencyKey: "payment:warm", MessageID: "warm", OrderID: 1, Amount: 1, Currency: "usd", PaymentMethod: "pm_card_visa"}
	for _, p := range []stripe.ParamsContainer{
		chargeParams(req, c.namespace),
		&stripe.PaymentIntentConfirmParams{OffSession: stripe.Bool(true)},
		refundParams(RefundRequest{IdempotencyKey: "refund:warm", MessageID: "warm", OrderID: 1, PaymentIntentID: "pi_warm", Amount: 1, Reason: "duplicate"}, c.namespace),
		&stripe.RefundListParams{PaymentIntent: stripe.String("pi_warm")},
		&stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: 1}},
	} {
		form.AppendTo(&form.Values{}, p)
	}
	for _, a := range []struct {
		body string
		into any
	}{
		{warmIntent, &stripe.PaymentIntent{}},
		{`{"object":"list","data":[` + warmIntent + `],"has_more":false,"url":"/v1/payment_intents"}`, &stripe.PaymentIntentList{}},
		{warmRefund, &stripe.Refund{}},
		{`{"object":"list","data":[` + warmRefund + `],"has_more":false,"url":"/v1/refunds"}`, &stripe.RefundList{}},
		{`{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"declined","payment_intent":` + warmIntent + `}`, &stripe.Error{}},
	} {
		if err := json.Unmarshal([]byte(a.body), a.into); err != nil {
			return fmt.Errorf("payment: warm: decode %T: %w", a.into, err)
		}
	}
	return nil
}

// warmIntent and warmRefund are answers in Stripe's shape, with the fields
// the Client reads.
const (
	warmIntent = `{"id":"pi_warm","object":"payment_intent","amount":1,"amount_received":1,"currency":"usd","created":1,` +
		`"latest_charge":"ch_warm","livemode":false,"metadata":{"message_id":"warm"},"payment_method":"pm_warm",` +
		`"payment_method_types":["card"],"last_payment_error":null,"next_action":null,"status":"succeeded"}`
	warmRefund = `{"id":"re_warm","object":"refund","amount":1,"charge":"ch_warm","created":1,"currency":"usd",` +
		`"metadata":{"message_id":"warm"},"payment_intent":"pi_warm","reason":"duplicate","status":"succeeded"}`
)
