package workflows

// PaymentSettledSignal is the signal a waiting OrderPlaced workflow receives
// when its payment settles at Stripe (a webhook event, or an operator's
// resolve): the workflow ID is identity.WorkflowID(consumer, message ID) of
// the payment row.
const PaymentSettledSignal = "payment-settled"

// PaymentSettled is the payload of PaymentSettledSignal: the PaymentIntent and
// its Stripe status, with Stripe's failure and decline codes when it failed.
type PaymentSettled struct {
	PaymentIntentID string `json:"payment_intent_id"`
	Status          string `json:"status"`
	FailureCode     string `json:"failure_code,omitempty"`
	DeclineCode     string `json:"decline_code,omitempty"`
}
