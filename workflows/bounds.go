package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// waitBounds are the configured bounds that decide how long a run waits
// for a payment. A run decides by them more than once, some of it days
// apart, and every open run replays its history on the next deploy: one
// bound lowered meanwhile would take another branch than the history
// holds (a timeout where a timer was recorded), and the run's workflow
// task would fail on every attempt. So a run records them in its history
// the first time a wait decides by them (Workflows.bounds), and keeps them.
type waitBounds struct {
	PaymentScheduleToClose   time.Duration `json:"payment_schedule_to_close"`
	PaymentProcessingMaxWait time.Duration `json:"payment_processing_max_wait"`
	RefundAwaitPayment       time.Duration `json:"refund_await_payment"`
}

// boundsChange is the GetVersion change ID of the recorded bounds, asked
// where a run first waits: a run of an earlier release replays with the
// configured bounds, as it ran.
const boundsChange = "wait-bounds-recorded"

func (c Config) waitBounds() waitBounds {
	return waitBounds{
		PaymentScheduleToClose:   c.PaymentScheduleToClose,
		PaymentProcessingMaxWait: c.PaymentProcessingMaxWait,
		RefundAwaitPayment:       c.RefundAwaitPayment,
	}
}

// refundPaymentWait is Config's waitBounds' refundPaymentWait.
func (c Config) refundPaymentWait() time.Duration { return c.waitBounds().refundPaymentWait() }

// peekBounds is the run's recorded bounds, or the configured ones when it
// recorded none yet, without recording them: for what decides no command
// (an activity's input).
func (w *Workflows) peekBounds(recorded *waitBounds) waitBounds {
	if recorded != nil {
		return *recorded
	}
	return w.cfg.waitBounds()
}

// bounds is the run's waitBounds: recorded in its history (a side effect)
// the first time, and the same thereafter, *recorded holding them.
func (w *Workflows) bounds(ctx workflow.Context, recorded **waitBounds) waitBounds {
	if *recorded != nil {
		return **recorded
	}
	b := w.cfg.waitBounds()
	if workflow.GetVersion(ctx, boundsChange, workflow.DefaultVersion, 1) == 1 {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return b }).Get(&b); err != nil {
			// A recorded side effect always decodes into the type it
			// was recorded from; keep the configured bounds otherwise.
			b = w.cfg.waitBounds()
		}
	}
	*recorded = &b
	return b
}

// pendingUntil is when a refund that found its payment pending stops
// waiting for it, and whether that is still ahead: refundPaymentWait from
// the run's start or, for a refund that waited for its missing payment
// first, from when it found the payment pending (pendingFrom), since only
// then did the payment's own bound begin to run.
func (w *Workflows) pendingUntil(ctx workflow.Context, recorded **waitBounds, start, pendingFrom time.Time) (time.Time, bool) {
	wait := w.bounds(ctx, recorded).refundPaymentWait()
	now := workflow.Now(ctx)
	until := start.Add(wait)
	if now.Before(until) {
		return until, true
	}
	if pendingFrom.IsZero() {
		return until, false
	}
	from := pendingFrom.Add(wait)
	if !now.Before(from) || workflow.GetVersion(ctx, refundPendingFromChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return until, false
	}
	return from, true
}
