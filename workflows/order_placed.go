package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/message"
)

// OrderPlacedName is the workflow type of order.placed messages. Running
// histories refer to it: never rename it.
const OrderPlacedName = "OrderPlaced"

// StatusQuery is the name of the query that returns a workflow's Status.
const StatusQuery = "status"

// OrderPlacedInput is the workflow's input: the message's identity and its
// validated data.
type OrderPlacedInput struct {
	Consumer  string              `json:"consumer"`
	MessageID string              `json:"message_id"`
	Order     message.OrderPlaced `json:"order"`
}

// Stages of an OrderPlaced workflow, as the status query reports them.
const (
	StageCharging       = "charging"
	StageSendingReceipt = "sending_receipt"
	StageCompleted      = "completed"
)

// Outcomes of an OrderPlaced workflow.
const (
	// OutcomeCompleted: charged once, receipt sent.
	OutcomeCompleted = "completed"
	// OutcomePaymentFailed: the card was declined or the request refused; no receipt.
	OutcomePaymentFailed = "payment_failed"
	// OutcomeBusinessDuplicate: another message already holds this order; nothing charged.
	OutcomeBusinessDuplicate = "business_duplicate"
	// OutcomeReceiptFailed: charged once; SendGrid refused the receipt for good.
	OutcomeReceiptFailed = "receipt_failed"
	// OutcomeReceiptUnknown: charged once; at-most-once could not tell whether the receipt went out.
	OutcomeReceiptUnknown = "receipt_unknown"
)

// Status is what the status query returns, and the workflow's result.
type Status struct {
	Consumer  string                    `json:"consumer"`
	MessageID string                    `json:"message_id"`
	OrderID   int64                     `json:"order_id"`
	Stage     string                    `json:"stage"`
	Outcome   string                    `json:"outcome,omitempty"`
	Payment   *activities.ChargeResult  `json:"payment,omitempty"`
	Receipt   *activities.ReceiptResult `json:"receipt,omitempty"`
}

// Workflows holds the workflow implementations and their configuration.
type Workflows struct {
	cfg Config
}

// New validates cfg and returns the workflows configured by it.
func New(cfg Config) (*Workflows, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("workflow config: %w", err)
	}
	return &Workflows{cfg: cfg.withDefaults()}, nil
}

// Register registers every workflow with r under its stable name.
func (w *Workflows) Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(w.OrderPlaced, workflow.RegisterOptions{Name: OrderPlacedName})
	r.RegisterWorkflowWithOptions(w.PruneRecords, workflow.RegisterOptions{Name: PruneRecordsName})
}

// OrderPlaced handles one order.placed message: it charges the order once
// and, when paid, sends one receipt. Each step is an activity that is safe to
// retry; this function only orders them, so it is deterministic.
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
	var a *activities.Activities

	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Charging order %d with Stripe under key `%s`.", in.Order.OrderID, payKey))
	pctx := workflow.WithActivityOptions(ctx, w.cfg.paymentOptions(fmt.Sprintf("charge order %d (%s)", in.Order.OrderID, payKey)))
	var charge activities.ChargeResult
	err = workflow.ExecuteActivity(pctx, a.ChargeOrder, activities.ChargeInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID,
		Amount: in.Order.Amount, Currency: in.Order.Currency, PaymentMethod: in.Order.PaymentMethod,
	}).Get(ctx, &charge)
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Charging order %d failed: %s", in.Order.OrderID, rootMessage(err)))
		return st, fmt.Errorf("charge order %d: %w", in.Order.OrderID, err)
	}
	st.Payment = &charge
	switch charge.Outcome {
	case activities.PaymentBusinessDuplicate:
		st.Stage, st.Outcome = StageCompleted, OutcomeBusinessDuplicate
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Not charged: order %d is already held by message `%s`.", in.Order.OrderID, charge.HeldBy))
		return st, nil
	case activities.PaymentDeclined:
		st.Stage, st.Outcome = StageCompleted, OutcomePaymentFailed
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Payment of order %d refused (%s %s); no receipt sent.", in.Order.OrderID, charge.FailureCode, charge.DeclineCode))
		return st, nil
	}

	st.Stage = StageSendingReceipt
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Order %d paid (%s). Sending the receipt under ledger key `%s`.", in.Order.OrderID, charge.PaymentIntentID, mailKey))
	ectx := workflow.WithActivityOptions(ctx, w.cfg.emailOptions(fmt.Sprintf("send receipt of order %d (%s)", in.Order.OrderID, mailKey)))
	var receipt activities.ReceiptResult
	err = workflow.ExecuteActivity(ectx, a.SendReceipt, activities.ReceiptInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.Order.OrderID,
		Amount: in.Order.Amount, Currency: in.Order.Currency, To: in.Order.CustomerEmail,
		PaymentIntentID: charge.PaymentIntentID,
	}).Get(ctx, &receipt)
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
