package activities

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// Activity type names. Running histories refer to an activity by the name
// it was scheduled under, so each is a constant that a Go rename cannot
// change; workflows schedule activities by these names, never by a method
// value. They equal the method names the activities were first registered
// under, so histories recorded before they were constants replay.
const (
	ChargeOrderName        = "ChargeOrder"
	ChargeOrderLocallyName = "ChargeOrderLocally"
	SendReceiptName        = "SendReceipt"
	SendReceiptLocallyName = "SendReceiptLocally"
	SettlePaymentName      = "SettlePayment"
	PruneName              = "Prune"
	RefundOrderName        = "RefundOrder"
	SendRefundReceiptName  = "SendRefundReceipt"
)

// Register registers every activity of a with r under its constant name.
// A new exported method of Activities is an activity only once it is listed
// here (TestRegisterListsEveryActivity checks that none is forgotten). It is
// a function, not a method: every exported method of Activities must be an
// activity, or registering the struct as a whole would fail.
func Register(r worker.ActivityRegistry, a *Activities) {
	for name, fn := range a.activities() {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// activities maps each activity name to its method.
func (a *Activities) activities() map[string]any {
	return map[string]any{
		ChargeOrderName:        a.ChargeOrder,
		ChargeOrderLocallyName: a.ChargeOrderLocally,
		SendReceiptName:        a.SendReceipt,
		SendReceiptLocallyName: a.SendReceiptLocally,
		SettlePaymentName:      a.SettlePayment,
		PruneName:              a.Prune,
		RefundOrderName:        a.RefundOrder,
		SendRefundReceiptName:  a.SendRefundReceipt,
	}
}
