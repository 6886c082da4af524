package route

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/message"
	"github.com/effectively/effectively/workflows"
)

// RefundRequested routes order.refund_requested: the consumer order-refund
// starts the OrderRefund workflow (order-refund/<message id>), which refunds
// part of the order's recorded payment and sends a refund receipt.
func RefundRequested() Route {
	return Route{
		Type:     message.TypeRefundRequested,
		Consumer: message.ConsumerRefundRequested,
		Schema:   message.RefundRequestedSchema,
		Workflow: workflows.OrderRefundName,
		Input: func(m *message.Message) (any, error) {
			r, err := valueOf[*message.RefundRequested](m)
			if err != nil {
				return nil, err
			}
			return workflows.OrderRefundInput{Consumer: m.Consumer, MessageID: m.ID, Refund: *r}, nil
		},
		SearchAttributes: func(m *message.Message) temporal.SearchAttributes {
			var orderID int64
			if r, err := valueOf[*message.RefundRequested](m); err == nil {
				orderID = r.OrderID
			}
			return workflows.SearchAttributes(m.Consumer, m.ID, orderID)
		},
		Describe: func(m *message.Message) (string, string) {
			r, err := valueOf[*message.RefundRequested](m)
			if err != nil {
				return "", ""
			}
			return fmt.Sprintf("Refund of order %d from message %s", r.OrderID, m.ID),
				fmt.Sprintf("Message `%s` (%s), consumer `%s`: refund %d of order %d under key `%s`, then send the refund receipt under ledger key `%s`.",
					m.ID, m.Type, m.Consumer, r.Amount, r.OrderID,
					identity.MustKey(identity.EffectRefund, m.ID), identity.MustKey(identity.EffectRefundEmail, m.ID))
		},
	}
}
