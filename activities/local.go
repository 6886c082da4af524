package activities

import (
	"context"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
)

// The workflow runs each effect once as a local activity first, through
// ChargeOrderLocally, SendReceiptLocally, RefundOrderLocally and
// SendRefundReceiptLocally, and falls back to the regular
// activity when that attempt fails. The local variants return the effect's
// error as data, inside their result: the SDK writes a failed local
// activity's error message into the history's marker as plain text, past the
// failure converter, whereas a result is a payload, encrypted by the codec
// like every other. (Timeouts and cancellations, which carry no customer
// data, stay errors.)

// LocalCharge is the outcome of a local ChargeOrder attempt.
type LocalCharge struct {
	Result ChargeResult  `json:"result"`
	Err    *AttemptError `json:"error,omitempty"`
}

// Outcome is the attempt's result, or its error as data.
func (l LocalCharge) Outcome() (ChargeResult, *AttemptError) { return l.Result, l.Err }

// LocalReceipt is the outcome of a local SendReceipt attempt.
type LocalReceipt struct {
	Result ReceiptResult `json:"result"`
	Err    *AttemptError `json:"error,omitempty"`
}

// Outcome is the attempt's result, or its error as data.
func (l LocalReceipt) Outcome() (ReceiptResult, *AttemptError) { return l.Result, l.Err }

// LocalRefund is the outcome of a local RefundOrder attempt.
type LocalRefund struct {
	Result RefundResult  `json:"result"`
	Err    *AttemptError `json:"error,omitempty"`
}

// Outcome is the attempt's result, or its error as data.
func (l LocalRefund) Outcome() (RefundResult, *AttemptError) { return l.Result, l.Err }

// LocalRateWait is the longest a local attempt waits for its slot at a
// provider's shared rate limit (ratelimit.WithMaxWait). It holds its
// workflow's task and a local slot of the workflow worker meanwhile, so in
// a backlog it steps aside at once: the regular activity, on its route's
// queue (workflows.Config.RouteQueues), waits in the line instead.
const LocalRateWait = time.Second

// Activity type names of the local activities.
const (
	ChargeOrderLocallyName = "ChargeOrderLocally"
	SendReceiptLocallyName = "SendReceiptLocally"
	// The refund's: run by OrderRefund histories from the release that
	// added them on (workflows.refundLocalChange).
	RefundOrderLocallyName       = "RefundOrderLocally"
	SendRefundReceiptLocallyName = "SendRefundReceiptLocally"
)

func init() {
	register(ChargeOrderLocallyName, func(a *Activities) any { return a.ChargeOrderLocally })
	register(SendReceiptLocallyName, func(a *Activities) any { return a.SendReceiptLocally })
	register(RefundOrderLocallyName, func(a *Activities) any { return a.RefundOrderLocally })
	register(SendRefundReceiptLocallyName, func(a *Activities) any { return a.SendRefundReceiptLocally })
}

// ChargeOrderLocally is ChargeOrder for a local activity: the same work,
// its error returned inside the result. It alone takes the intake's claim
// (ChargeInput.Claim).
func (a *Activities) ChargeOrderLocally(ctx context.Context, in ChargeInput) (LocalCharge, error) {
	r, e, err := locally(ctx, in, a.charge)
	return LocalCharge{Result: r, Err: e}, err
}

// SendReceiptLocally is SendReceipt for a local activity: the same work,
// its error returned inside the result.
func (a *Activities) SendReceiptLocally(ctx context.Context, in ReceiptInput) (LocalReceipt, error) {
	r, e, err := locally(ctx, in, a.SendReceipt)
	return LocalReceipt{Result: r, Err: e}, err
}

// RefundOrderLocally is RefundOrder for a local activity: the same work
// under the same protocol, its error returned inside the result. It alone
// sends the refund receipt with the refund (RefundInput.ReceiptBudget).
func (a *Activities) RefundOrderLocally(ctx context.Context, in RefundInput) (LocalRefund, error) {
	r, e, err := locally(ctx, in, a.refund)
	return LocalRefund{Result: r, Err: e}, err
}

// SendRefundReceiptLocally is SendRefundReceipt for a local activity: the
// same work, its error returned inside the result.
func (a *Activities) SendRefundReceiptLocally(ctx context.Context, in RefundReceiptInput) (LocalReceipt, error) {
	r, e, err := locally(ctx, in, a.SendRefundReceipt)
	return LocalReceipt{Result: r, Err: e}, err
}

// locally runs fn as a local attempt: its wait at a provider's rate limit
// bounded by LocalRateWait, its error returned as data (attemptError).
func locally[In, Out any](ctx context.Context, in In, fn func(context.Context, In) (Out, error)) (Out, *AttemptError, error) {
	r, err := fn(ratelimit.WithMaxWait(ctx, LocalRateWait), in)
	e, err := attemptError(ctx, err)
	return r, e, err
}
