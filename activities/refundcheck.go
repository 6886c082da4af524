package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// CheckRefundName is the activity type name of CheckRefund.
const CheckRefundName = "CheckRefund"

func init() { register(CheckRefundName, func(a *Activities) any { return a.CheckRefund }) }

// CheckRefundInput names a refund recorded pending.
type CheckRefundInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
}

// CheckRefund reads where a refund recorded pending stands. The refunds row
// first: when the Stripe webhook (charge.refund.updated) has settled it, no
// request is made. Otherwise the Refund is retrieved from Stripe, a read of
// one object and so strongly consistent, and its status recorded as the
// webhook records it (store.UpdateRefund: only forward moves, a failure
// gives the amount back). It calls Stripe only with GET, so a lost answer
// or a retry costs a read and never a refund. The outcome is RefundPending
// while Stripe still has not moved the money, else RefundRefunded or
// RefundFailed.
func (a *Activities) CheckRefund(ctx context.Context, in CheckRefundInput) (RefundResult, error) {
	r, err := a.Store.RefundOf(ctx, in.Consumer, in.MessageID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return RefundResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("check refund of order %d: message %s has no refund recorded", in.OrderID, in.MessageID), ErrTypeInvalidInput, err)
		}
		return RefundResult{}, fmt.Errorf("check refund of order %d: %w", in.OrderID, err)
	}
	if r.State != store.RefundPending {
		return checkedRefund(r)
	}
	rf, err := a.Payments.RetrieveRefund(ctx, r.RefundID)
	if err != nil {
		if errors.Is(err, payment.ErrNotFound) || payment.Classify(err) == payment.ClassInvalid {
			return RefundResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("check refund of order %d: refund %s cannot be read: %v", in.OrderID, r.RefundID, err), ErrTypeUnexpectedState, err)
		}
		return RefundResult{}, fmt.Errorf("check refund of order %d: %w", in.OrderID, err)
	}
	u, err := a.Store.UpdateRefund(ctx, store.RefundUpdate{
		RefundID: rf.ID, Key: r.Key, Status: rf.Status, FailureReason: rf.FailureReason, Source: "retrieve",
	})
	if err != nil {
		return RefundResult{}, fmt.Errorf("check refund of order %d: %w", in.OrderID, err)
	}
	if u.Changed {
		logger(ctx).Info("pending refund settled", "order_id", in.OrderID, "refund_id", rf.ID, "state", u.Refund.State)
	}
	return checkedRefund(u.Refund)
}

// checkedRefund is a refunds row past its claim as CheckRefund returns it.
func checkedRefund(r store.Refund) (RefundResult, error) {
	res, err := recordedRefund(r)
	if err != nil {
		return res, err
	}
	res.Recorded = false
	return res, nil
}
