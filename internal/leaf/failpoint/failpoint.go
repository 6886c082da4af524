// Package failpoint lets tests kill the real worker process at a named point
// of the code path — between a provider's answer and the commit that records
// it, say — to prove what happens in each crash window.
//
// Failpoints exist only in binaries built with the build tag "failpoints"
// (go build -tags failpoints ./worker), which only the crash tests do. In
// such a binary they are inert unless the process was started with
// EFFECTIVELY_FAILPOINTS set:
//
//	EFFECTIVELY_FAILPOINTS=payment.after_charge,email.after_send
//
// In the default build Hit is an empty function that the compiler inlines
// away: the shipped worker holds no failpoint code, and no environment
// variable can arm one (tools/workerproc's TestDefaultWorkerHasNoFailpoints
// checks the binary's symbols).
//
// An armed failpoint sends SIGKILL to its own process the first time it is
// hit: no deferred function runs, no transaction commits, no connection is
// closed politely — as when the machine loses power. An unarmed Hit costs one
// atomic load.
package failpoint

// EnvVar names the variable that arms failpoints.
const EnvVar = "EFFECTIVELY_FAILPOINTS"

// The failpoints in the code path, in the order a message meets them.
const (
	// IntakeBeforeInsert: a broker delivery is held, nothing of it recorded.
	IntakeBeforeInsert = "intake.before_insert"
	// IntakeAfterInsert: the inbox row is committed, the broker not yet acked.
	IntakeAfterInsert = "intake.after_insert"
	// APIAfterInsert: the HTTP intake's inbox row is committed, the answer
	// not yet sent.
	APIAfterInsert = "api.after_insert"
	// PaymentAfterClaim: the order is claimed, Stripe not yet called.
	PaymentAfterClaim = "payment.after_claim"
	// PaymentAfterCreate: the PaymentIntent is created, not yet confirmed;
	// Postgres holds no trace of it (its ID is recorded with the outcome).
	PaymentAfterCreate = "payment.after_create"
	// PaymentAfterCharge: Stripe charged, neither the result nor the
	// PaymentIntent's ID recorded yet.
	PaymentAfterCharge = "payment.after_charge"
	// PaymentAfterRecord: the payment is committed, the activity not completed.
	PaymentAfterRecord = "payment.after_record"
	// EmailAfterSend: SendGrid accepted the receipt, the ledger not yet updated.
	EmailAfterSend = "email.after_send"
	// OutboxAfterPublish: the event is published, its row not yet marked.
	OutboxAfterPublish = "outbox.after_publish"
	// RefundAfterRefund: Stripe created the refund, the result not yet
	// recorded.
	RefundAfterRefund = "refund.after_refund"
	// RefundAfterRecord: the refund is committed, with its receipt's claim
	// when its local attempt holds one, and the receipt not yet sent.
	RefundAfterRecord = "refund.after_record"
)
