package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/internal/leaf/deadline"
)

// DefaultTaskQueue is the task queue the worker polls and the starter starts
// workflows on, unless EFFECTIVELY_TASK_QUEUE says otherwise.
const DefaultTaskQueue = "effectively"

// StripeKeyWindow is how long Stripe keeps an idempotency key. A payment
// retried after the key expired could charge again, so every retry of the
// payment activity must happen inside it (see Config.Validate).
const StripeKeyWindow = 24 * time.Hour

// keyWindowMargin keeps the payment activity's schedule-to-close clear of the
// key window's edge: clocks differ and the last attempt itself takes time.
const keyWindowMargin = time.Hour

// Config holds the activity timeouts and retry policies of the workflows.
// Zero fields take the defaults of DefaultConfig.
type Config struct {
	// PaymentStartToClose bounds one ChargeOrder attempt: a claim, one
	// Stripe call (stripe-go retries inside it) and one record. Default 2m.
	PaymentStartToClose time.Duration
	// PaymentScheduleToClose bounds all regular attempts of ChargeOrder.
	// With the local attempts before them it must stay inside Stripe's 24 h
	// key window less a 1 h margin. Default 20h.
	PaymentScheduleToClose time.Duration
	// EmailStartToClose bounds one SendReceipt attempt. Default 1m.
	EmailStartToClose time.Duration
	// EmailScheduleToClose bounds all attempts of SendReceipt. Default 24h.
	EmailScheduleToClose time.Duration
	// RetryInitialInterval is the first backoff of both activities. Default 1s.
	RetryInitialInterval time.Duration
	// RetryMaximumInterval caps the backoff. Default 5m.
	RetryMaximumInterval time.Duration
	// LocalStartToClose bounds an effect's first, local attempt (the
	// charge's twice: the receipt it sends gets as long again); when it
	// fails or times out, the regular activity takes over. Default 10s.
	LocalStartToClose time.Duration
	// PaymentProcessingPoll is how long a processing payment waits for
	// PaymentSettledSignal before it is retrieved again (a durable timer).
	// Default 10m.
	PaymentProcessingPoll time.Duration
	// PaymentProcessingMaxWait bounds the wait for a processing payment;
	// past it the workflow fails (payment_processing_timeout) for an
	// operator. Default 72h: bank debits take days.
	PaymentProcessingMaxWait time.Duration
	// RefundAwaitPayment bounds how long a refund whose order has no
	// payment yet (the refund arrived first) waits for one before it ends
	// order_not_paid. Default: the payment's own bound
	// (PaymentScheduleToClose + PaymentProcessingMaxWait) plus 5m.
	RefundAwaitPayment time.Duration
	// RefundPendingMaxWait bounds the wait for a refund Stripe answered
	// pending: past it, still pending, the workflow fails
	// (refund_pending_timeout) for an operator, its receipt unsent; the
	// webhook still settles the ledger when Stripe ends it. Default 30
	// days: some refunds take weeks to reach the customer's bank.
	RefundPendingMaxWait time.Duration
	// HeartbeatTimeout is how long a regular effect attempt may go without
	// a heartbeat (sent every 2s) before Temporal retries it elsewhere.
	// Default 10s.
	HeartbeatTimeout time.Duration
	// RouteQueues, when set, is the base of the routes' effect task queues:
	// a route's charges, refunds, receipts and settles run on
	// RouteQueue(RouteQueues, consumer), polled by workers of their own
	// (with slots of their own), so effects waiting at a provider's rate
	// limit on one route hold no slot another route needs. Empty: they run
	// on the workflow's task queue. Replay does not compare task queues, so
	// it may change while workflows run.
	RouteQueues string
}

// RouteQueue is the task queue of consumer's effect activities under base
// (Config.RouteQueues).
func RouteQueue(base, consumer string) string { return base + "-effects-" + consumer }

// onRoute puts opts on consumer's effect queue when routes have their own
// (Config.RouteQueues).
func (c Config) onRoute(consumer string, opts workflow.ActivityOptions) workflow.ActivityOptions {
	if c.RouteQueues != "" {
		opts.TaskQueue = RouteQueue(c.RouteQueues, consumer)
	}
	return opts
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		PaymentStartToClose:    2 * time.Minute,
		PaymentScheduleToClose: 20 * time.Hour,
		EmailStartToClose:      time.Minute,
		EmailScheduleToClose:   24 * time.Hour,
		RetryInitialInterval:   time.Second,
		RetryMaximumInterval:   5 * time.Minute,
		LocalStartToClose:      10 * time.Second,

		PaymentProcessingPoll:    10 * time.Minute,
		PaymentProcessingMaxWait: 72 * time.Hour,
		HeartbeatTimeout:         10 * time.Second,
		RefundAwaitPayment:       20*time.Hour + 72*time.Hour + refundAwaitMargin,
		RefundPendingMaxWait:     30 * 24 * time.Hour,
	}
}

// refundAwaitMargin is how much longer than the payment's own bound a
// refund waits for a payment that has not arrived.
const refundAwaitMargin = 5 * time.Minute

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.PaymentStartToClose, d.PaymentStartToClose)
	set(&c.PaymentScheduleToClose, d.PaymentScheduleToClose)
	set(&c.EmailStartToClose, d.EmailStartToClose)
	set(&c.EmailScheduleToClose, d.EmailScheduleToClose)
	set(&c.RetryInitialInterval, d.RetryInitialInterval)
	set(&c.RetryMaximumInterval, d.RetryMaximumInterval)
	set(&c.LocalStartToClose, d.LocalStartToClose)
	set(&c.PaymentProcessingPoll, d.PaymentProcessingPoll)
	set(&c.PaymentProcessingMaxWait, d.PaymentProcessingMaxWait)
	set(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	set(&c.RefundPendingMaxWait, d.RefundPendingMaxWait)
	set(&c.RefundAwaitPayment, c.refundPaymentWait()+refundAwaitMargin)
	return c
}

// Validate checks the configuration; the worker calls it before it starts.
func (c Config) Validate() error {
	c = c.withDefaults()
	limit := StripeKeyWindow - keyWindowMargin
	// The local attempt comes first: the regular ones must still end inside
	// the key window after it (with the receipt it may send, twice
	// LocalStartToClose: receiptLocalOptions).
	if local := c.receiptLocalOptions("").StartToCloseTimeout; c.PaymentScheduleToClose+local > limit {
		return fmt.Errorf("PaymentScheduleToClose is %s and the local attempt takes up to %s: together at most %s (Stripe keeps idempotency keys for %s; a later retry could charge twice)",
			c.PaymentScheduleToClose, local, limit, StripeKeyWindow)
	}
	if c.PaymentStartToClose > c.PaymentScheduleToClose {
		return fmt.Errorf("PaymentStartToClose (%s) is longer than PaymentScheduleToClose (%s)", c.PaymentStartToClose, c.PaymentScheduleToClose)
	}
	if c.EmailStartToClose > c.EmailScheduleToClose {
		return fmt.Errorf("EmailStartToClose (%s) is longer than EmailScheduleToClose (%s)", c.EmailStartToClose, c.EmailScheduleToClose)
	}
	for name, d := range map[string]time.Duration{
		"PaymentStartToClose": c.PaymentStartToClose, "EmailStartToClose": c.EmailStartToClose,
		"RetryInitialInterval": c.RetryInitialInterval, "RetryMaximumInterval": c.RetryMaximumInterval,
		"LocalStartToClose":     c.LocalStartToClose,
		"PaymentProcessingPoll": c.PaymentProcessingPoll, "PaymentProcessingMaxWait": c.PaymentProcessingMaxWait,
		"HeartbeatTimeout": c.HeartbeatTimeout, "RefundAwaitPayment": c.RefundAwaitPayment,
		"RefundPendingMaxWait": c.RefundPendingMaxWait,
	} {
		if d < 0 {
			return fmt.Errorf("%s is negative (%s)", name, d)
		}
	}
	// A provider request is not sent within deadline.DefaultMargin of its
	// attempt's deadline: an attempt shorter than twice that would spend
	// most of itself unable to send.
	for name, d := range map[string]time.Duration{
		"PaymentStartToClose": c.PaymentStartToClose, "EmailStartToClose": c.EmailStartToClose, "LocalStartToClose": c.LocalStartToClose,
	} {
		if d < 2*deadline.DefaultMargin {
			return fmt.Errorf("%s is %s: at least %s (no provider request is sent within %s of its attempt's deadline)", name, d, 2*deadline.DefaultMargin, deadline.DefaultMargin)
		}
	}
	if c.PaymentProcessingPoll > c.PaymentProcessingMaxWait {
		return fmt.Errorf("PaymentProcessingPoll (%s) is longer than PaymentProcessingMaxWait (%s)", c.PaymentProcessingPoll, c.PaymentProcessingMaxWait)
	}
	if c.RetryMaximumInterval < c.RetryInitialInterval {
		return fmt.Errorf("RetryMaximumInterval (%s) is shorter than RetryInitialInterval (%s)", c.RetryMaximumInterval, c.RetryInitialInterval)
	}
	return nil
}

// retryPolicy is shared by both activities. Permanent failures are returned
// by the activities as non-retryable application errors, so no error type
// names are listed here.
func (c Config) retryPolicy() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval: c.RetryInitialInterval,
		// Doubling spreads retries of a provider outage over minutes, not seconds.
		BackoffCoefficient: 2,
		MaximumInterval:    c.RetryMaximumInterval,
		// Unlimited: schedule-to-close bounds the attempts instead, so the
		// payment's last retry is known to fall inside the key window.
		MaximumAttempts: 0,
	}
}

func (c Config) paymentOptions(consumer, summary string) workflow.ActivityOptions {
	return c.onRoute(consumer, workflow.ActivityOptions{
		StartToCloseTimeout:    c.PaymentStartToClose,
		ScheduleToCloseTimeout: c.PaymentScheduleToClose,
		HeartbeatTimeout:       c.HeartbeatTimeout,
		RetryPolicy:            c.retryPolicy(),
		Summary:                summary,
	})
}

func (c Config) emailOptions(consumer, summary string) workflow.ActivityOptions {
	return c.onRoute(consumer, workflow.ActivityOptions{
		StartToCloseTimeout:    c.EmailStartToClose,
		ScheduleToCloseTimeout: c.EmailScheduleToClose,
		HeartbeatTimeout:       c.HeartbeatTimeout,
		RetryPolicy:            c.retryPolicy(),
		Summary:                summary,
	})
}

// settleOptions are the options of SettlePayment, run at each wake-up of
// the wait for a processing payment: a read of Stripe and one statement,
// retried for a few minutes; a wake-up whose retries run out leaves it to
// the next one.
func (c Config) settleOptions(consumer, summary string) workflow.ActivityOptions {
	schedule := min(10*time.Minute, c.PaymentProcessingPoll)
	return c.onRoute(consumer, workflow.ActivityOptions{
		StartToCloseTimeout:    min(time.Minute, schedule),
		ScheduleToCloseTimeout: schedule,
		RetryPolicy:            c.retryPolicy(),
		Summary:                summary,
	})
}

// receiptLocalOptions are the options of a charge's or a refund's local
// attempt, which may send the receipt after the effect's record:
// LocalStartToClose for the effect and as much again for the receipt
// (ChargeInput.ReceiptBudget, RefundInput.ReceiptBudget), so that the
// receipt's send has the time its own local attempt would.
func (c Config) receiptLocalOptions(summary string) workflow.LocalActivityOptions {
	o := c.localOptions(summary)
	o.StartToCloseTimeout += c.LocalStartToClose
	return o
}

// localOptions are the options of an effect's local attempt: one try of at
// most LocalStartToClose. Its retries are the regular activity's.
func (c Config) localOptions(summary string) workflow.LocalActivityOptions {
	return workflow.LocalActivityOptions{
		StartToCloseTimeout: c.LocalStartToClose,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	}
}
