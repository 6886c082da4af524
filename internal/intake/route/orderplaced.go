package route

import (
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// orderInput is the OrderPlaced workflow's input for m, without a claim.
func orderInput(m *message.Message, o *message.OrderPlaced) workflows.OrderPlacedInput {
	return workflows.OrderPlacedInput{Consumer: m.Consumer, MessageID: m.ID, Order: *o}
}

// OrderPlaced routes order.placed: the consumer order-placed starts the
// OrderPlaced workflow, which charges the order and sends its receipt.
func OrderPlaced() Route {
	return For(Spec[message.OrderPlaced]{
		Type:     message.TypeOrderPlaced,
		Consumer: message.ConsumerOrderPlaced,
		Schema:   message.OrderPlacedSchema,
		Workflow: workflows.OrderPlacedName,
		Effects:  []identity.Effect{identity.EffectPaymentIntent, identity.EffectPayment, identity.EffectEmail, identity.EffectOrderEmail},
		// ChargeOrder's claim marks the inbox row (store.ClaimPayment), or,
		// for a payment the intake claimed, its record.
		WorkflowMarksDispatched: true,
		// The payment is claimed with the inbox row: the local attempt takes
		// that claim as its own (activities.ChargeInput.Claim).
		Claim: func(m *message.Message, o *message.OrderPlaced) store.IntakeClaim {
			c, err := activities.IntakeClaim(orderInput(m, o).Charge())
			if err != nil {
				return store.IntakeClaim{} // the activity claims, and reports the error
			}
			return store.IntakeClaim{Payment: &c}
		},
		Input: func(m *message.Message, o *message.OrderPlaced) any {
			in := orderInput(m, o)
			in.Claim = m.Claimed
			return in
		},
		SearchAttributes: func(m *message.Message, o *message.OrderPlaced) temporal.SearchAttributes {
			return workflows.SearchAttributes(m.Consumer, m.ID, o.OrderID)
		},
		Describe: func(m *message.Message, o *message.OrderPlaced) (string, string) {
			return fmt.Sprintf("Order %d from message %s", o.OrderID, m.ID),
				fmt.Sprintf("Message `%s` (%s), consumer `%s`: charge order %d under key `%s`, then send its receipt under ledger key `%s`.",
					m.ID, m.Type, m.Consumer, o.OrderID,
					identity.MustKey(identity.EffectPayment, m.ID), identity.MustKey(identity.EffectEmail, m.ID))
		},
	})
}
