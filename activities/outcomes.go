package activities

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/metrics"
)

// count counts the outcome of one attempt at an effect of kind: result,
// or, for an error, the open case it leaves (fenced, unknown, unexpected).
// A transient error (retried) is no outcome and is not counted here;
// Temporal's own metrics count failed attempts, and a provider_auth error
// is counted where it is classified (boundary). An empty result counts
// nothing.
func (a *Activities) count(kind metrics.Effect, result metrics.Result, err error) {
	if err != nil {
		switch errorType(err) {
		case ErrTypePaymentUnknown:
			result = metrics.ResultUnknown
		case ErrTypeFenced:
			result = metrics.ResultFenced
		case ErrTypeUnexpectedState:
			result = metrics.ResultUnexpected
		default:
			return
		}
	}
	if result != "" {
		a.Metrics.EffectOutcome(kind, result)
	}
}

// countCharge counts the outcome of one ChargeOrder attempt; a business
// duplicate is an intake decision.
func (a *Activities) countCharge(consumer string, r ChargeResult, err error) {
	var res metrics.Result
	switch {
	case err != nil:
	case r.Outcome == PaymentBusinessDuplicate:
		a.Metrics.IntakeDecision(consumer, metrics.DecisionBusinessDuplicate)
		return
	case r.Outcome == PaymentFailed:
		res = metrics.ResultDeclined
	case r.Outcome == PaymentProcessing:
		res = metrics.ResultProcessing
	case r.Reconciled:
		res = metrics.ResultReconciled
	case r.Replayed || r.Recorded:
		res = metrics.ResultReplayed
	case r.Outcome == PaymentPaid:
		res = metrics.ResultPaid
	}
	a.count(metrics.EffectPayment, res, err)
}

// countReceipt counts the outcome of one attempt at a receipt of kind
// (metrics.EffectReceipt or metrics.EffectRefundReceipt).
func (a *Activities) countReceipt(kind metrics.Effect, r ReceiptResult, err error) {
	var res metrics.Result
	switch {
	case err != nil:
	case r.Recorded:
		res = metrics.ResultReplayed
	case r.Outcome == ReceiptSent:
		res = metrics.ResultSent
	case r.Outcome == ReceiptFailed:
		res = metrics.ResultFailed
	case r.Outcome == ReceiptUnknown:
		res = metrics.ResultUnknown
	}
	a.count(kind, res, err)
}

// countRefund counts the outcome of one RefundOrder attempt that reached
// Stripe or its record. Decisions made without Stripe (beyond the payment,
// order not paid) are the message's outcome, in its processed row.
func (a *Activities) countRefund(r RefundResult, err error) {
	var res metrics.Result
	switch {
	case err != nil:
	case r.Reconciled:
		res = metrics.ResultReconciled
	case r.Replayed || r.Recorded:
		res = metrics.ResultReplayed
	case r.Outcome == RefundRefunded:
		res = metrics.ResultRefunded
	case r.Outcome == RefundPending:
		res = metrics.ResultProcessing
	case r.Outcome == RefundFailed:
		res = metrics.ResultFailed
	}
	a.count(metrics.EffectRefund, res, err)
}

// errorType is the type of an application error, "" for any other error.
func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}
