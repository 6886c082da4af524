package message

import "strings"

// The order.refund_requested type and the consumer that handles it.
const (
	// TypeRefundRequested is the type of a message asking to refund part or
	// all of a paid order, whose data is a RefundRequested.
	TypeRefundRequested = "order.refund_requested"
	// ConsumerRefundRequested is the consumer name that handles
	// order.refund_requested. It is a valid identity consumer name, and
	// with the message ID it names the workflow: order-refund/<message id>.
	ConsumerRefundRequested = "order-refund"
)

// RefundRequestedSchema validates order.refund_requested data into a
// *RefundRequested.
var RefundRequestedSchema = Schema{typ: TypeRefundRequested, decode: func(data *object) (any, *Error) {
	r, err := decodeRefundRequested(data)
	if err != nil {
		return nil, err
	}
	return r, nil
}}

// RefundRequested is the data of an order.refund_requested message: refund
// Amount of the order's recorded payment. The currency is the payment's;
// the customer is the order's.
type RefundRequested struct {
	// OrderID is the order to refund: a positive integer of at most
	// 2^53-1, like OrderPlaced.OrderID.
	OrderID int64 `json:"order_id"`
	// Amount is what to refund, in minor units, 1 to 99999999. A request
	// beyond what remains of the payment is refused, not clipped
	// (docs/refunds.md).
	Amount int64 `json:"amount"`
	// Reason is Stripe's refund reason: one of RefundReasons.
	Reason string `json:"reason"`
}

// RefundReasons are the reasons Stripe accepts for a refund. A free-text
// reason is not accepted: Stripe would refuse it, and a refund must not be
// half-understood.
var RefundReasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// refundRequestedFields are the fields of order.refund_requested data, in
// the order they are validated.
var refundRequestedFields = []string{"order_id", "amount", "reason"}

// decodeRefundRequested validates the data object of an
// order.refund_requested message.
func decodeRefundRequested(data *object) (*RefundRequested, *Error) {
	for _, mb := range data.members {
		if !contains(refundRequestedFields, mb.key) {
			return nil, newError(CodeUnknownField, joinPath("data", mb.key),
				"unknown field; %s data has only the fields %s", TypeRefundRequested, strings.Join(refundRequestedFields, ", "))
		}
	}
	var (
		r   RefundRequested
		err *Error
	)
	if r.OrderID, err = positiveInt(data, "order_id", "a positive integer", maxOrderID); err != nil {
		return nil, err
	}
	if r.Amount, err = positiveInt(data, "amount", "a positive integer number of minor units", maxAmount); err != nil {
		return nil, err
	}
	if r.Reason, err = stringField(data, "data", "reason"); err != nil {
		return nil, err
	}
	if !contains(RefundReasons, r.Reason) {
		return nil, newError(CodeInvalid, "data.reason", "unknown reason %s; accepted are %s", quote(r.Reason), strings.Join(RefundReasons, ", "))
	}
	return &r, nil
}
