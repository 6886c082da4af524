package activities

// Error types of the application errors activities return. Workflows,
// retry policies and operators match on these strings, never on Go type
// names. The values are in histories: never change one. Two are
// snake_case for that reason (ErrTypeUnexpectedState, and the workflows'
// ErrTypePaymentProcessingTimeout); the others are CamelCase.
const (
	// ErrTypeIdempotencyMismatch: a key was reused with different
	// parameters; a bug, not retried.
	ErrTypeIdempotencyMismatch = "IdempotencyMismatch"
	// ErrTypePaymentUnknown: the charge's outcome could not be established;
	// recorded unknown for an operator, not retried.
	ErrTypePaymentUnknown = "PaymentUnknown"
	// ErrTypeUnexpectedState: the PaymentIntent is in a status effectively
	// never asks for; recorded unexpected for an operator, no receipt.
	ErrTypeUnexpectedState = "unexpected_state"
	// ErrTypeInvalidInput: the activity input is unusable.
	ErrTypeInvalidInput = "InvalidInput"
	// ErrTypeFenced: a later claim owns the ledger row. Retryable: the
	// attempt Temporal still waits for claims again.
	ErrTypeFenced = "Fenced"
	// ErrTypeDraining: the worker is shutting down and takes no new
	// effect. Retryable: nothing was claimed.
	ErrTypeDraining = "Draining"
	// ErrTypeRetentionUnsafe: the retention is shorter than the horizon it
	// was checked against (or unset); pruning deletes nothing.
	ErrTypeRetentionUnsafe = "RetentionUnsafe"
	// ErrTypeAwaitingEmailEvent: a local SendReceipt attempt found that an
	// earlier attempt may have sent it. Retryable: the regular activity
	// waits ResendGrace for SendGrid's event.
	ErrTypeAwaitingEmailEvent = "AwaitingEmailEvent"
	// ErrTypeProviderAuth: the provider refused our configuration (401,
	// 403, a wrong SendGrid URL). Retryable and alerting, never recorded
	// as the effect's outcome.
	ErrTypeProviderAuth = "ProviderAuth"
	// ErrTypePaymentPending: RefundOrder found the order's payment not yet
	// final. Non-retryable: OrderRefund waits and runs it again, so that the
	// run that claims the refund has its whole schedule for its retries.
	ErrTypePaymentPending = "PaymentPending"
	// ErrTypeRefundNotSucceeded: SendRefundReceipt found the refund not
	// succeeded at Stripe (pending, failed): no receipt is sent for money
	// that did not move. Non-retryable.
	ErrTypeRefundNotSucceeded = "RefundNotSucceeded"
	// ErrTypePaymentMissing: RefundOrder, asked to wait (AwaitPayment),
	// found no payment of the order at all: its order may not have arrived.
	// Non-retryable: OrderRefund waits and asks again, up to its bound.
	ErrTypePaymentMissing = "PaymentMissing"
	// ErrTypeRateLimited: the provider request was not sent, the shared
	// rate limit having no slot in time. Retryable after its
	// NextRetryDelay; nothing reached the provider.
	ErrTypeRateLimited = "RateLimited"
	// ErrTypeTooLate: the provider request was not sent, too little of the
	// attempt being left for the call and its record
	// (deadline.TooLateError). Retryable at once: the next attempt has a
	// deadline of its own; nothing reached the provider.
	ErrTypeTooLate = "TooLate"
)
