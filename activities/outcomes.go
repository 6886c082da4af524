package activities

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/metrics"
)

// countCharge counts the outcome of one ChargeOrder attempt. A transient
// error (retried) is no outcome and is not counted here; Temporal's own
// metrics count failed attempts.
func (a *Activities) countCharge(consumer string, r ChargeResult, err error) {
	m := a.Metrics
	if err != nil {
		switch errorType(err) {
		case ErrTypePaymentUnknown:
			m.EffectOutcome(metrics.EffectPayment, metrics.ResultUnknown)
		case ErrTypeFenced:
			m.EffectOutcome(metrics.EffectPayment, metrics.ResultFenced)
		case ErrTypeUnexpectedState:
			m.EffectOutcome(metrics.EffectPayment, metrics.ResultUnexpected)
		}
		return
	}
	switch {
	case r.Outcome == PaymentBusinessDuplicate:
		m.IntakeDecision(consumer, metrics.DecisionBusinessDuplicate)
	case r.Outcome == PaymentDeclined:
		m.EffectOutcome(metrics.EffectPayment, metrics.ResultDeclined)
	case r.Outcome == PaymentProcessing:
		m.EffectOutcome(metrics.EffectPayment, metrics.ResultProcessing)
	case r.Reconciled:
		m.EffectOutcome(metrics.EffectPayment, metrics.ResultReconciled)
	case r.Replayed || r.Recorded:
		m.EffectOutcome(metrics.EffectPayment, metrics.ResultReplayed)
	case r.Outcome == PaymentPaid:
		m.EffectOutcome(metrics.EffectPayment, metrics.ResultPaid)
	}
}

// countReceipt counts the outcome of one SendReceipt attempt.
func (a *Activities) countReceipt(r ReceiptResult, err error) {
	m := a.Metrics
	if err != nil {
		if errorType(err) == ErrTypeFenced {
			m.EffectOutcome(metrics.EffectReceipt, metrics.ResultFenced)
		}
		return
	}
	switch {
	case r.Recorded:
		m.EffectOutcome(metrics.EffectReceipt, metrics.ResultReplayed)
	case r.Outcome == ReceiptSent:
		m.EffectOutcome(metrics.EffectReceipt, metrics.ResultSent)
	case r.Outcome == ReceiptFailed:
		m.EffectOutcome(metrics.EffectReceipt, metrics.ResultFailed)
	case r.Outcome == ReceiptUnknown:
		m.EffectOutcome(metrics.EffectReceipt, metrics.ResultUnknown)
	}
}

// errorType is the type of an application error, "" for any other error.
func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}
