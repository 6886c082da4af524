package route

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/message"
	"github.com/effectively/effectively/workflows"
)

// OrderPlaced routes order.placed: the consumer order-placed starts the
// OrderPlaced workflow, which charges the order and sends its receipt.
func OrderPlaced() Route {
	return Route{
		Type:     message.TypeOrderPlaced,
		Consumer: message.ConsumerOrderPlaced,
		Schema:   message.OrderPlacedSchema,
		Workflow: workflows.OrderPlacedName,
		// ChargeOrder's claim marks the inbox row (store.ClaimPayment).
		WorkflowMarksDispatched: true,
		Input: func(m *message.Message) (any, error) {
			o, err := valueOf[*message.OrderPlaced](m)
			if err != nil {
				return nil, err
			}
			return workflows.OrderPlacedInput{Consumer: m.Consumer, MessageID: m.ID, Order: *o}, nil
		},
		SearchAttributes: func(m *message.Message) temporal.SearchAttributes {
			var orderID int64
			if o, err := valueOf[*message.OrderPlaced](m); err == nil {
				orderID = o.OrderID
			}
			return workflows.SearchAttributes(m.Consumer, m.ID, orderID)
		},
		Describe: func(m *message.Message) (string, string) {
			o, err := valueOf[*message.OrderPlaced](m)
			if err != nil {
				return "", ""
			}
			return fmt.Sprintf("Order %d from message %s", o.OrderID, m.ID),
				fmt.Sprintf("Message `%s` (%s), consumer `%s`: charge order %d under key `%s`, then send its receipt under ledger key `%s`.",
					m.ID, m.Type, m.Consumer, o.OrderID,
					identity.MustKey(identity.EffectPayment, m.ID), identity.MustKey(identity.EffectEmail, m.ID))
		},
	}
}
