package workflows

// PaymentSettledSignal is the signal that tells an OrderPlaced workflow
// waiting for a processing payment that Stripe settled it. It is sent (by
// the Stripe webhook consumer, or `starter resolve`) to the workflow ID
// identity.WorkflowID(consumer, message ID) of the payment row, after the
// ledger was settled. The workflow treats it as a wake-up: it reads the
// outcome through the ledger and Stripe, never from the payload alone.
const PaymentSettledSignal = "payment-settled"

// PaymentSettled is the payload of PaymentSettledSignal.
type PaymentSettled struct {
	PaymentIntentID string `json:"payment_intent_id"`
	Status          string `json:"status"`
	FailureCode     string `json:"failure_code,omitempty"`
	DeclineCode     string `json:"decline_code,omitempty"`
}

// RefundSettledSignal tells an OrderRefund waiting for a pending refund
// that Stripe moved it (charge.refund.updated). The Stripe webhook sends it
// to identity.WorkflowID(consumer, message ID) of the refunds row, after
// the ledger recorded the update. Like PaymentSettledSignal it only wakes
// the wait: CheckRefund reads the outcome from the ledger.
const RefundSettledSignal = "refund-settled"

// RefundSettled is the payload of RefundSettledSignal.
type RefundSettled struct {
	RefundID string `json:"refund_id"`
	Status   string `json:"status"`
}
