package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// settleWait waits for an effect its provider left open (a processing
// payment, a pending refund) until deadline. Each time the signal named
// signal arrives (the webhook's wake-up) or the poll timer fires (poll
// gives each timer's length), settle runs: an activity that reads the
// ledger and, unless settled already, the provider. The wait ends when
// settle reports the effect settled, or with its error when that is
// non-retryable; another error (the provider or Postgres unreachable for
// the activity's whole schedule) leaves it to the next wake-up. timedOut:
// the deadline passed first.
func settleWait(ctx workflow.Context, signal string, deadline time.Time, poll func() time.Duration, settle func() (settled bool, err error)) (timedOut bool, err error) {
	logger := workflow.GetLogger(ctx)
	signals := workflow.GetSignalChannel(ctx, signal)
	for {
		remaining := deadline.Sub(workflow.Now(ctx))
		if remaining <= 0 {
			return true, nil
		}
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		timer := workflow.NewTimer(timerCtx, min(poll(), remaining))
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(signals, func(c workflow.ReceiveChannel, _ bool) {
			var payload map[string]any
			c.Receive(ctx, &payload)
			logger.Info("settled signal", "signal", signal, "payload", payload)
		})
		sel.AddFuture(timer, func(workflow.Future) {})
		sel.Select(ctx)
		cancelTimer()

		settled, err := settle()
		var appErr *temporal.ApplicationError
		switch {
		case errors.As(err, &appErr) && appErr.NonRetryable():
			return false, err
		case err != nil:
			logger.Warn("settling the open effect failed; waiting for the next wake-up", "signal", signal, "error", err)
		case settled:
			return false, nil
		}
	}
}
