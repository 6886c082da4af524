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

// OrderPlacedName is the workflow type of order.placed messages; histories
// refer to it. Never add GetVersion here: see docs/routes.md, "Versioning".
const OrderPlacedName = "OrderPlaced"

func init() { register(OrderPlacedName, func(w *Workflows) any { return w.OrderPlaced }) }

// OrderPlacedInput is the workflow's input: the message's identity and its
// validated data.
type OrderPlacedInput struct {
	Consumer  string              `json:"consumer"`
	MessageID string              `json:"message_id"`
	Order     message.OrderPlaced `json:"order"`
	// Claim is the payment's claim the intake took in the transaction that
	// recorded the message, nil for none (activities.ChargeInput.Claim).
	Claim *message.Claim `json:"claim,omitempty"`
}

// Charge is the charge of in's order, as the workflow asks for it and the
// intake claims it (activities.IntakeClaim).
func (in OrderPlacedInput) Charge() activities.ChargeInput {
	return activities.ChargeInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID,
		Amount: in.Order.Amount, Currency: in.Order.Currency, PaymentMethod: in.Order.PaymentMethod,
		ReceiptTo: in.Order.CustomerEmail, Claim: in.Claim,
	}
}

// firstTaskStarted is the event ID of the first workflow task's start
// (after WorkflowExecutionStarted and WorkflowTaskScheduled). Code that runs
// in a task started later follows a task that failed or timed out (its
// worker died or stopped), whose events the SDK skips, or another event.
const firstTaskStarted = 3

// charge is in's charge as the workflow runs it, with the time the
// receipt's send keeps at the end of the charge's local attempt
// (receiptLocalOptions). The intake's claim goes only to a local attempt
// scheduled by the workflow's first task: one run again because that task
// failed or timed out claims through the ledger, and so finds what the
// first attempt recorded instead of calling Stripe again. The input of a
// local activity is not part of the history, so this changes no replay.
func (w *Workflows) charge(ctx workflow.Context, in OrderPlacedInput) activities.ChargeInput {
	c := in.Charge()
	c.ReceiptBudget = w.cfg.LocalStartToClose
	if workflow.GetInfo(ctx).GetCurrentHistoryLength() > firstTaskStarted {
		c.Claim = nil
	}
	return c
}

// ErrTypePaymentProcessingTimeout is the type of the non-retryable error an
// OrderPlaced workflow fails with when its payment is still processing
// after Config.PaymentProcessingMaxWait.
const ErrTypePaymentProcessingTimeout = "payment_processing_timeout"

// Stages of an OrderPlaced workflow (and StageSendingReceipt, StageCompleted).
const (
	StageCharging Stage = "charging"
	// StagePaymentProcessing: Stripe is processing the payment; the
	// workflow waits for it to settle (PaymentSettledSignal or its timer).
	StagePaymentProcessing Stage = "payment_processing"
)

// Outcomes of an OrderPlaced workflow (and OutcomeReceiptFailed,
// OutcomeReceiptUnknown: charged once, receipt refused or maybe not sent).
const (
	// OutcomeCompleted: charged once, receipt sent.
	OutcomeCompleted Outcome = "completed"
	// OutcomePaymentFailed: the card was declined or the request refused; no receipt.
	OutcomePaymentFailed Outcome = "payment_failed"
	// OutcomeBusinessDuplicate: another message already holds this order; nothing charged.
	OutcomeBusinessDuplicate Outcome = "business_duplicate"
	// OutcomePaymentProcessingTimeout: still processing after
	// Config.PaymentProcessingMaxWait; the workflow fails with
	// ErrTypePaymentProcessingTimeout and leaves it to an operator.
	OutcomePaymentProcessingTimeout Outcome = "payment_processing_timeout"
)

// Status is what the status query returns, and the workflow's result.
type Status struct {
	Consumer  string                    `json:"consumer"`
	MessageID string                    `json:"message_id"`
	OrderID   int64                     `json:"order_id"`
	Stage     Stage                     `json:"stage"`
	Outcome   Outcome                   `json:"outcome,omitempty"`
	Payment   *activities.ChargeResult  `json:"payment,omitempty"`
	Receipt   *activities.ReceiptResult `json:"receipt,omitempty"`
	// Fallbacks names the effects ("payment", "receipt") whose local
	// attempt failed, so that they ran as regular activities.
	Fallbacks []string `json:"fallbacks,omitempty"`
}

// OrderPlaced handles one order.placed message: it charges the order once
// and, when paid, sends one receipt. Each step is an activity that is safe to
// retry; this function only orders them, so it is deterministic.
//
// The intake claims the payment in the transaction that records the
// message, and the input carries that claim (Claim) to the local attempt of
// the first workflow task, which then needs no claim of its own. The charge's attempt that records
// the payment paid also claims the receipt in that record's transaction and
// sends it (ChargeInput.ReceiptTo, ChargeResult.Receipt); SendReceipt then
// returns that outcome without a send or a transaction (ReceiptInput.Sent),
// or, when the charge sent none, claims the receipt itself. The activities
// and their order are those of every earlier release, so histories replay
// both ways: older histories on this code, and this code's histories on a
// worker still running the old code, which ignores the new fields and
// claims the payment and the receipt through the ledger (docs/guarantees.md,
// "Transactions of a paid message").
//
// Each effect first runs once as a local activity, inside the workflow task:
// with the eager start of the worker's intake, a message then completes in
// one workflow task and a handful of history events. A local attempt that
// fails or times out falls back to the same function as a regular activity,
// with the long retry policy of Config. The two are safe to mix: the ledger
// fences a superseded claim, whichever kind of attempt made it.
func (w *Workflows) OrderPlaced(ctx workflow.Context, in OrderPlacedInput) (Status, error) {
	st := Status{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID, Stage: StageCharging}
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return st, nil }); err != nil {
		return st, fmt.Errorf("register status query: %w", err)
	}
	payKey, err := identity.Key(identity.EffectPayment, in.MessageID)
	if err != nil {
		return st, err
	}
	mailKey, err := identity.Key(identity.EffectEmail, in.MessageID)
	if err != nil {
		return st, err
	}

	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Charging order %d with Stripe under key `%s`.", in.Order.OrderID, payKey))
	charge, err := effect[activities.ChargeResult, activities.LocalCharge](ctx, &st.Fallbacks, "payment",
		activities.ChargeOrderLocallyName, activities.ChargeOrderName, w.charge(ctx, in),
		w.cfg.receiptLocalOptions(fmt.Sprintf("charge order %d (%s)", in.Order.OrderID, payKey)),
		w.cfg.paymentOptions(in.Consumer, fmt.Sprintf("charge order %d (%s)", in.Order.OrderID, payKey)))
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Charging order %d failed: %s", in.Order.OrderID, rootMessage(err)))
		return st, fmt.Errorf("charge order %d: %w", in.Order.OrderID, err)
	}
	st.Payment = &charge
	if charge.Outcome == activities.PaymentProcessing {
		if charge, err = w.awaitPayment(ctx, &st, in, charge); err != nil {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("Payment of order %d not settled: %s", in.Order.OrderID, rootMessage(err)))
			return st, fmt.Errorf("charge order %d: %w", in.Order.OrderID, err)
		}
		st.Payment = &charge
	}
	switch charge.Outcome {
	case activities.PaymentBusinessDuplicate:
		st.Stage, st.Outcome = StageCompleted, OutcomeBusinessDuplicate
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Not charged: order %d is already held by message `%s`.", in.Order.OrderID, charge.HeldBy))
		return st, nil
	case activities.PaymentFailed:
		st.Stage, st.Outcome = StageCompleted, OutcomePaymentFailed
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Payment of order %d refused (%s %s); no receipt sent.", in.Order.OrderID, charge.FailureCode, charge.DeclineCode))
		return st, nil
	case activities.PaymentPaid:
		// Only a paid order gets a receipt.
	case activities.PaymentProcessing:
		// awaitPayment returns a settled outcome or an error, never this:
		// refuse rather than send a receipt for money that has not moved.
		return st, temporal.NewNonRetryableApplicationError(fmt.Sprintf("charge order %d: payment still processing: no receipt", in.Order.OrderID), activities.ErrTypeUnexpectedState, nil)
	}

	st.Stage = StageSendingReceipt
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d paid (%s). Sending the receipt under ledger key `%s`.", in.Order.OrderID, charge.PaymentIntentID, mailKey))
	receipt, err := effect[activities.ReceiptResult, activities.LocalReceipt](ctx, &st.Fallbacks, "receipt",
		activities.SendReceiptLocallyName, activities.SendReceiptName, activities.ReceiptInput{
			Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID,
			Amount: in.Order.Amount, Currency: in.Order.Currency, To: in.Order.CustomerEmail,
			PaymentIntentID: charge.PaymentIntentID, Sent: charge.Receipt,
		}, w.cfg.localOptions(fmt.Sprintf("send receipt of order %d (%s)", in.Order.OrderID, mailKey)), w.cfg.emailOptions(in.Consumer, fmt.Sprintf("send receipt of order %d (%s)", in.Order.OrderID, mailKey)))
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d paid; sending the receipt failed: %s", in.Order.OrderID, rootMessage(err)))
		return st, fmt.Errorf("send receipt of order %d: %w", in.Order.OrderID, err)
	}
	st.Receipt = &receipt
	st.Stage = StageCompleted
	switch receipt.Outcome {
	case activities.ReceiptSent:
		st.Outcome = OutcomeCompleted
	case activities.ReceiptFailed:
		st.Outcome = OutcomeReceiptFailed
	default:
		st.Outcome = OutcomeReceiptUnknown
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d paid (%s); receipt %s (%s).", in.Order.OrderID, charge.PaymentIntentID, receipt.Outcome, receipt.ProviderMessageID))
	return st, nil
}

// awaitPayment waits for a processing payment to settle: each time a
// PaymentSettledSignal arrives or the poll timer fires, SettlePayment reads
// the ledger and, unless settled already, retrieves the PaymentIntent by its
// recorded ID. It returns the settled outcome (paid or declined), or after
// Config.PaymentProcessingMaxWait a non-retryable error of type
// ErrTypePaymentProcessingTimeout. A receipt is never sent from here: the
// caller sends one only for PaymentPaid.
func (w *Workflows) awaitPayment(ctx workflow.Context, st *Status, in OrderPlacedInput, charge activities.ChargeResult) (activities.ChargeResult, error) {
	st.Stage = StagePaymentProcessing
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Payment of order %d is processing at Stripe (%s): waiting for it to settle.", in.Order.OrderID, charge.PaymentIntentID))
	var recorded *waitBounds
	maxWait := w.bounds(ctx, &recorded).PaymentProcessingMaxWait
	opts := workflow.WithActivityOptions(ctx, w.cfg.settleOptions(in.Consumer, fmt.Sprintf("settle payment of order %d", in.Order.OrderID)))
	timedOut, err := settleWait(ctx, PaymentSettledSignal, workflow.Now(ctx).Add(maxWait),
		func() time.Duration { return w.cfg.PaymentProcessingPoll },
		func() (bool, error) {
			var out activities.ChargeResult
			err := workflow.ExecuteActivity(opts, activities.SettlePaymentName,
				activities.SettleInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID}).Get(ctx, &out)
			if err == nil && out.Outcome != activities.PaymentProcessing {
				charge = out
				return true, nil
			}
			return false, err
		})
	if timedOut {
		st.Outcome = OutcomePaymentProcessingTimeout
		return charge, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d still processing after %s: operator action needed", in.Order.OrderID, maxWait),
			ErrTypePaymentProcessingTimeout, nil)
	}
	return charge, err
}

// localOutcome is the result of a local variant of an activity: the
// effect's result, or its error as data.
type localOutcome[Out any] interface {
	Outcome() (Out, *activities.AttemptError)
}

// effect runs one effect with input in: once as the local activity named
// local first (ChargeOrderLocally, SendReceiptLocally,
// SendRefundReceiptLocally) with lopts, and as
// the regular activity named regular, with opts and their retry policy, when that
// attempt failed in a way a retry could cure. Activities are scheduled by
// their registered names (activities.*Name), which a Go rename cannot
// change.
func effect[Out any, L localOutcome[Out], In any](ctx workflow.Context, fallbacks *[]string, name string,
	local, regular string, in In, lopts workflow.LocalActivityOptions, opts workflow.ActivityOptions,
) (Out, error) {
	var lo L
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, lopts), local, in).Get(ctx, &lo)
	var attempt *activities.AttemptError
	if err == nil {
		var out Out
		if out, attempt = lo.Outcome(); attempt == nil {
			return out, nil
		}
	}
	if err := fallBack(ctx, fallbacks, name, err, attempt); err != nil {
		var zero Out
		return zero, err
	}
	var out Out
	err = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), regular, in).Get(ctx, &out)
	return out, err
}

// fallBack decides what follows a failed local attempt of effect: err is
// the local activity's own error (a timeout, a cancellation), attempt the
// effect's error returned as data. A non-retryable error or a cancellation
// is returned, since a regular attempt would end the same way; anything
// else is noted in fallbacks (the status's Fallbacks) and nil is returned:
// the regular activity takes over.
func fallBack(ctx workflow.Context, fallbacks *[]string, effect string, err error, attempt *activities.AttemptError) error {
	if err == nil && attempt != nil {
		err = attempt.Err()
	}
	var (
		appErr   *temporal.ApplicationError
		canceled *temporal.CanceledError
	)
	if (errors.As(err, &appErr) && appErr.NonRetryable()) || errors.As(err, &canceled) {
		return err
	}
	workflow.GetLogger(ctx).Warn("local attempt failed; running the effect as a regular activity", "effect", effect, "error", err)
	*fallbacks = append(*fallbacks, effect)
	return nil
}

// rootMessage is the innermost error's message, for a one-line summary.
func rootMessage(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
