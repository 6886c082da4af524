package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// OrderRefundName is the workflow type of order.refund_requested messages.
// Running histories refer to it: never rename it.
const OrderRefundName = "OrderRefund"

func init() { register(OrderRefundName, func(w *Workflows) any { return w.OrderRefund }) }

// OrderRefundInput is the workflow's input: the message's identity and its
// validated data.
type OrderRefundInput struct {
	Consumer  string                  `json:"consumer"`
	MessageID string                  `json:"message_id"`
	Refund    message.RefundRequested `json:"refund"`
	// Claim is the refund's claim the intake took in the transaction that
	// recorded the message, nil for none (activities.RefundInput.Claim).
	Claim *message.Claim `json:"claim,omitempty"`
}

// Request is the refund of in as the workflow asks for it and the intake
// claims it (activities.IntakeRefundClaim), without the intake's claim.
func (in OrderRefundInput) Request() activities.RefundInput {
	return activities.RefundInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Refund.OrderID,
		Amount: in.Refund.Amount, Reason: in.Refund.Reason,
	}
}

// Stages of an OrderRefund workflow (and StageSendingReceipt, StageCompleted).
const (
	StageRefunding Stage = "refunding"
)

// Outcomes of an OrderRefund workflow (and OutcomeReceiptFailed,
// OutcomeReceiptUnknown: refunded once, receipt refused or maybe not sent).
const (
	// OutcomeRefunded: refunded once, refund receipt sent.
	OutcomeRefunded Outcome = "refunded"
	// OutcomeRefundFailed: Stripe refused the refund; no receipt.
	OutcomeRefundFailed Outcome = "refund_failed"
	// OutcomeRefundExceedsPayment: more than what remains of the payment;
	// Stripe was not called.
	OutcomeRefundExceedsPayment Outcome = "refund_exceeds_payment"
	// OutcomeOrderNotPaid: the order was never paid; Stripe was not called.
	OutcomeOrderNotPaid Outcome = "order_not_paid"
	// OutcomeRefundPendingTimeout: Stripe still reported the refund
	// pending after RefundPendingMaxWait; no receipt was sent.
	OutcomeRefundPendingTimeout Outcome = "refund_pending_timeout"
)

// StageRefundPending is the stage of a refund Stripe created but has not
// moved the money of yet; the workflow waits for it (awaitRefund).
const StageRefundPending Stage = "refund_pending"

// ErrTypeRefundPendingTimeout is the type of the non-retryable error an
// OrderRefund fails with when its refund is still pending after
// Config.RefundPendingMaxWait: an operator follows it up at Stripe.
const ErrTypeRefundPendingTimeout = "refund_pending_timeout"

// refundSettleChange is the GetVersion change ID of the wait for a refund
// Stripe answered pending. Only this release records a refund pending, so
// it is asked only there and no earlier history meets it.
const refundSettleChange = "refund-pending-settles"

// refundPendingPollMax caps the poll of a pending refund: the webhook's
// RefundSettledSignal wakes the wait at once, the poll only backs it up.
const refundPendingPollMax = time.Hour

// RefundStatus is what the status query of an OrderRefund returns, and its
// result.
type RefundStatus struct {
	Consumer  string                    `json:"consumer"`
	MessageID string                    `json:"message_id"`
	OrderID   int64                     `json:"order_id"`
	Amount    int64                     `json:"amount"`
	Stage     Stage                     `json:"stage"`
	Outcome   Outcome                   `json:"outcome,omitempty"`
	Refund    *activities.RefundResult  `json:"refund,omitempty"`
	Receipt   *activities.ReceiptResult `json:"receipt,omitempty"`
	// Fallbacks names the effects ("refund", "refund receipt") whose
	// local attempt failed, so that they ran as regular activities.
	Fallbacks []string `json:"fallbacks,omitempty"`
}

// refundOptions bound one run of the refund activity. Like a charge, every
// retry after the key was sent must fall inside Stripe's key window, so the
// payment's timeouts apply. A refund waiting for its order's payment to
// settle (PaymentPending) ends its run, and OrderRefund runs it again after
// a timer while the payment may still settle (refundPaymentWait): a run
// that claims the refund has its whole schedule for the refund's retries.
func (c Config) refundOptions(consumer, summary string) workflow.ActivityOptions {
	return c.paymentOptions(consumer, summary)
}

// refundPaymentWait is how long a refund waits for its order's payment to
// settle: as long as the payment itself may stay open, the payment
// activity's schedule-to-close and then the wait of a processing payment.
func (b waitBounds) refundPaymentWait() time.Duration {
	return b.PaymentScheduleToClose + b.PaymentProcessingMaxWait
}

// refundPendingChange is the GetVersion change ID of a refund whose local
// attempt found the payment pending: it waits in the workflow, as a
// regular run's PaymentPending does, instead of falling back to the
// regular activity. Asked only there.
const refundPendingChange = "refund-pending-waits-in-workflow"

// refundPendingFromChange is the GetVersion change ID of a refund that
// waited for a missing payment and then found it pending: it waits
// refundPaymentWait from that moment, not from its own start. Asked only
// where the old code gave up.
const refundPendingFromChange = "refund-pending-bound-from-its-payment"

// refundWaitChange is the GetVersion change ID of the refund's wait past
// one run of RefundOrder. It is asked only where the old code failed (a run
// that ended on PaymentPending), so runs that never wait that long carry no
// marker and replay as before.
const refundWaitChange = "refund-waits-for-payment"

// refundAwaitChange is the GetVersion change ID of a refund waiting for a
// payment that does not exist yet. Like refundWaitChange, it is asked only
// where the old code ended (an order with no payment): other runs carry no
// marker.
const refundAwaitChange = "refund-awaits-missing-payment"

// refundLocalChange is the GetVersion change ID of the local first
// attempts of the refund and its receipt (RefundOrderLocally,
// SendRefundReceiptLocally), asked first thing: a run of an earlier
// release has no marker and replays its regular activities.
const refundLocalChange = "refund-local-first"

// paymentMissing reports whether err ended a RefundOrder run on
// PaymentMissing: the order had no payment yet, nothing was recorded.
func paymentMissing(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypePaymentMissing
}

// paymentPending reports whether err ended a RefundOrder run on
// PaymentPending: the payment was still open at its last attempt, so no
// refund was claimed and no key was sent, and a new run starts no
// earlier key window.
func paymentPending(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == activities.ErrTypePaymentPending
}

// OrderRefund handles one order.refund_requested message: it refunds part
// of the order's payment once and, when refunded, sends one refund
// receipt. Whether the refund may happen at all (the order was paid, and
// the refunds of its payment stay within what it charged) is decided by
// Postgres inside the refund activity, not here.
//
// Like OrderPlaced's, each effect first runs once as a local activity
// inside the workflow task (RefundOrderLocally, SendRefundReceiptLocally),
// then, when that attempt failed in a way a retry could cure, as the
// regular activity; runs of releases before that replay as they ran
// (refundLocalChange).
func (w *Workflows) OrderRefund(ctx workflow.Context, in OrderRefundInput) (RefundStatus, error) {
	st := RefundStatus{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Refund.OrderID, Amount: in.Refund.Amount, Stage: StageRefunding}
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (RefundStatus, error) { return st, nil }); err != nil {
		return st, fmt.Errorf("register status query: %w", err)
	}
	refundKey, err := identity.Key(identity.EffectRefund, in.MessageID)
	if err != nil {
		return st, err
	}
	mailKey, err := identity.Key(identity.EffectRefundEmail, in.MessageID)
	if err != nil {
		return st, err
	}

	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Refunding %d of order %d under key `%s`.", in.Refund.Amount, in.Refund.OrderID, refundKey))
	// Runs from the release that added the local attempts take them; an
	// earlier run replays its regular activities (refundLocalChange).
	local := workflow.GetVersion(ctx, refundLocalChange, workflow.DefaultVersion, 1) == 1
	var refund activities.RefundResult
	refundSummary := fmt.Sprintf("refund order %d (%s)", in.Refund.OrderID, refundKey)
	actx := workflow.WithActivityOptions(ctx, w.cfg.refundOptions(in.Consumer, refundSummary))
	start := workflow.Now(ctx)
	// The bounds of the waits below, as this run first decided by them
	// (Workflows.bounds).
	var recorded *waitBounds
	// A refund that came before its order's payment waits for it, up to
	// RefundAwaitPayment; then it ends order_not_paid.
	missingPoll := min(time.Second, w.cfg.PaymentProcessingPoll)
	pendingPoll := missingPoll
	// pendingFrom is when a refund that waited for its missing payment
	// first found it pending.
	var waitedMissing bool
	var pendingFrom time.Time
	for first := local; ; first = false {
		req := in.Request()
		// An activity's input decides no command: the bounds are not
		// recorded for it.
		req.AwaitPayment = workflow.Now(ctx).Before(start.Add(w.peekBounds(recorded).RefundAwaitPayment))
		if first {
			// The first attempt runs inside the workflow task, as a
			// charge's does: no task queue between the message and its
			// refund. A payment still missing waits below, like a regular
			// attempt's; any other failure a retry could cure goes on
			// as the regular activity.
			// The refund receipt keeps the end of the local attempt
			// (receiptLocalOptions). The input of a local activity is not
			// part of the history, so this changes no replay.
			req.ReceiptBudget = w.cfg.LocalStartToClose
			// The intake's claim goes only to the attempt the first
			// workflow task schedules, as a charge's does (charge): one
			// run again because that task failed or timed out claims
			// through the ledger, and finds what the first recorded.
			if workflow.GetInfo(ctx).GetCurrentHistoryLength() <= firstTaskStarted {
				req.Claim = in.Claim
			}
			var lo activities.LocalRefund
			err = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, w.cfg.receiptLocalOptions(refundSummary)),
				activities.RefundOrderLocallyName, req).Get(ctx, &lo)
			var attempt *activities.AttemptError
			if err == nil {
				if refund, attempt = lo.Outcome(); attempt == nil {
					break
				}
				err = attempt.Err()
			}
			if !paymentMissing(err) && (!paymentPending(err) || workflow.GetVersion(ctx, refundPendingChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion) {
				if err = fallBack(ctx, &st.Fallbacks, "refund", err, nil); err != nil {
					break
				}
				continue
			}
		} else {
			err = workflow.ExecuteActivity(actx, activities.RefundOrderName, req).Get(ctx, &refund)
		}
		if paymentMissing(err) && workflow.GetVersion(ctx, refundAwaitChange, workflow.DefaultVersion, 1) == 1 {
			awaitUntil := start.Add(w.bounds(ctx, &recorded).RefundAwaitPayment)
			wait := min(missingPoll, max(awaitUntil.Sub(workflow.Now(ctx)), 0))
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("Refund of order %d waits for the order's payment to arrive (until %s).",
				in.Refund.OrderID, awaitUntil.UTC().Format(time.RFC3339)))
			if err := workflow.Sleep(ctx, wait); err != nil {
				return st, err
			}
			missingPoll = min(2*missingPoll, w.cfg.PaymentProcessingPoll)
			waitedMissing = true
			continue
		}
		if err == nil || !paymentPending(err) {
			break
		}
		if waitedMissing && pendingFrom.IsZero() {
			pendingFrom = workflow.Now(ctx)
		}
		until, ok := w.pendingUntil(ctx, &recorded, start, pendingFrom)
		if !ok || workflow.GetVersion(ctx, refundWaitChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			break
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Refund of order %d waits for its payment to settle (until %s).",
			in.Refund.OrderID, until.UTC().Format(time.RFC3339)))
		// From a second, doubling up to PaymentProcessingPoll, as the wait
		// for a missing payment: the run's own retries did that before
		// PaymentPending ended the run.
		if err := workflow.Sleep(ctx, pendingPoll); err != nil {
			return st, err
		}
		pendingPoll = min(2*pendingPoll, w.cfg.PaymentProcessingPoll)
	}
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Refunding order %d failed: %s", in.Refund.OrderID, rootMessage(err)))
		return st, fmt.Errorf("refund order %d: %w", in.Refund.OrderID, err)
	}
	st.Refund = &refund
	if refund.Outcome == activities.RefundPending && workflow.GetVersion(ctx, refundSettleChange, workflow.DefaultVersion, 1) == 1 {
		if refund, err = w.awaitRefund(ctx, &st, in, refund); err != nil {
			return st, err
		}
		st.Refund = &refund
	}
	switch refund.Outcome {
	case activities.RefundOrderNotPaid:
		st.Stage, st.Outcome = StageCompleted, OutcomeOrderNotPaid
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Not refunded: order %d was never paid.", in.Refund.OrderID))
		return st, nil
	case activities.RefundExceedsPayment:
		st.Stage, st.Outcome = StageCompleted, OutcomeRefundExceedsPayment
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Not refunded: %d is more than the %d left of order %d's payment.",
			in.Refund.Amount, refund.Paid-refund.Refunded, in.Refund.OrderID))
		return st, nil
	case activities.RefundFailed:
		st.Stage, st.Outcome = StageCompleted, OutcomeRefundFailed
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Stripe refused the refund of order %d (%s); no receipt sent.", in.Refund.OrderID, refund.FailureCode))
		return st, nil
	case activities.RefundRefunded, activities.RefundPending:
		// Pending reaches here only in a history without the version
		// marker: one whose refund result an earlier release's workflow
		// code handled (a rolling deploy), which went on to the receipt.
		// Replay must do the same; SendRefundReceipt then refuses it
		// (RefundNotSucceeded), so no receipt goes out from this release.
	}

	st.Stage = StageSendingReceipt
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d refunded (%s). Sending the refund receipt under ledger key `%s`.", in.Refund.OrderID, refund.RefundID, mailKey))
	var receipt activities.ReceiptResult
	mailSummary := fmt.Sprintf("send refund receipt of order %d (%s)", in.Refund.OrderID, mailKey)
	mailIn := activities.RefundReceiptInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Refund.OrderID,
		Amount: in.Refund.Amount, Currency: refund.Currency, RefundID: refund.RefundID, Sent: refund.Receipt,
	}
	if local {
		receipt, err = effect[activities.ReceiptResult, activities.LocalReceipt](ctx, &st.Fallbacks, "refund receipt",
			activities.SendRefundReceiptLocallyName, activities.SendRefundReceiptName, mailIn,
			w.cfg.localOptions(mailSummary), w.cfg.emailOptions(in.Consumer, mailSummary))
	} else {
		mctx := workflow.WithActivityOptions(ctx, w.cfg.emailOptions(in.Consumer, mailSummary))
		err = workflow.ExecuteActivity(mctx, activities.SendRefundReceiptName, mailIn).Get(ctx, &receipt)
	}
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d refunded; sending the refund receipt failed: %s", in.Refund.OrderID, rootMessage(err)))
		return st, fmt.Errorf("send refund receipt of order %d: %w", in.Refund.OrderID, err)
	}
	st.Receipt = &receipt
	st.Stage = StageCompleted
	switch receipt.Outcome {
	case activities.ReceiptSent:
		st.Outcome = OutcomeRefunded
	case activities.ReceiptFailed:
		st.Outcome = OutcomeReceiptFailed
	case activities.ReceiptUnknown:
		st.Outcome = OutcomeReceiptUnknown
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d refunded (%s); refund receipt %s.", in.Refund.OrderID, refund.RefundID, receipt.Outcome))
	return st, nil
}

// awaitRefund waits for a refund Stripe answered pending: each time
// RefundSettledSignal arrives or the poll timer fires (1 s, doubling to
// refundPendingPollMax), CheckRefund reads the ledger and, unless the
// webhook settled it already, retrieves the Refund. It returns the settled
// outcome (refunded or failed), or past RefundPendingMaxWait, as this run
// first recorded it, a non-retryable error of type
// ErrTypeRefundPendingTimeout. A receipt is never sent from here: the
// caller sends one only for a refund that succeeded.
func (w *Workflows) awaitRefund(ctx workflow.Context, st *RefundStatus, in OrderRefundInput, refund activities.RefundResult) (activities.RefundResult, error) {
	st.Stage = StageRefundPending
	var maxWait time.Duration
	// Recorded, so that a deploy that lowers the bound changes no running wait.
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return w.cfg.RefundPendingMaxWait }).Get(&maxWait); err != nil {
		return refund, err
	}
	deadline := workflow.Now(ctx).Add(maxWait)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Stripe has not moved the money of refund %s of order %d yet (%s): waiting for it until %s; no receipt before.",
		refund.RefundID, in.Refund.OrderID, refund.Status, deadline.UTC().Format(time.RFC3339)))
	opts := workflow.WithActivityOptions(ctx, w.cfg.settleOptions(in.Consumer, fmt.Sprintf("check refund of order %d (%s)", in.Refund.OrderID, refund.RefundID)))
	poll := min(time.Second, refundPendingPollMax)
	timedOut, err := settleWait(ctx, RefundSettledSignal, deadline,
		func() time.Duration {
			p := poll
			poll = min(2*poll, refundPendingPollMax)
			return p
		},
		func() (bool, error) {
			var out activities.RefundResult
			err := workflow.ExecuteActivity(opts, activities.CheckRefundName,
				activities.CheckRefundInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Refund.OrderID}).Get(ctx, &out)
			if err == nil && out.Outcome != activities.RefundPending {
				out.Replayed = refund.Replayed
				refund = out
				return true, nil
			}
			return false, err
		})
	if timedOut {
		st.Stage, st.Outcome = StageCompleted, OutcomeRefundPendingTimeout
		return refund, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund %s of order %d still pending at Stripe after %s: operator action needed; no receipt sent", refund.RefundID, in.Refund.OrderID, maxWait),
			ErrTypeRefundPendingTimeout, nil)
	}
	return refund, err
}
