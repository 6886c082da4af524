package route

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// RefundRequested routes order.refund_requested: the consumer order-refund
// starts the OrderRefund workflow, which refunds part of the order's
// recorded payment and sends a refund receipt.
func RefundRequested() Route {
	return For(Spec[message.RefundRequested]{
		Type:     message.TypeRefundRequested,
		Consumer: message.ConsumerRefundRequested,
		Schema:   message.RefundRequestedSchema,
		Workflow: workflows.OrderRefundName,
		Effects:  []identity.Effect{identity.EffectRefund, identity.EffectRefundEmail},
		Input: func(m *message.Message, r *message.RefundRequested) any {
			return workflows.OrderRefundInput{Consumer: m.Consumer, MessageID: m.ID, Refund: *r}
		},
		SearchAttributes: func(m *message.Message, r *message.RefundRequested) temporal.SearchAttributes {
			return workflows.SearchAttributes(m.Consumer, m.ID, r.OrderID)
		},
		Describe: func(m *message.Message, r *message.RefundRequested) (string, string) {
			return fmt.Sprintf("Refund of order %d from message %s", r.OrderID, m.ID),
				fmt.Sprintf("Message `%s` (%s), consumer `%s`: refund %d of order %d under key `%s`, then send the refund receipt under ledger key `%s`.",
					m.ID, m.Type, m.Consumer, r.Amount, r.OrderID,
					identity.MustKey(identity.EffectRefund, m.ID), identity.MustKey(identity.EffectRefundEmail, m.ID))
		},
	})
}
