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

// refundInput is the OrderRefund workflow's input for m, without a claim.
func refundInput(m *message.Message, r *message.RefundRequested) workflows.OrderRefundInput {
	return workflows.OrderRefundInput{Consumer: m.Consumer, MessageID: m.ID, Refund: *r}
}

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
		// The refund is claimed with the inbox row when its payment
		// succeeded and it fits: the local attempt takes that claim as its
		// own (activities.RefundInput.Claim).
		Claim: func(m *message.Message, r *message.RefundRequested) store.IntakeClaim {
			c, err := activities.IntakeRefundClaim(refundInput(m, r).Request())
			if err != nil {
				return store.IntakeClaim{} // the activity claims, and reports the error
			}
			return store.IntakeClaim{Refund: &c}
		},
		Input: func(m *message.Message, r *message.RefundRequested) any {
			in := refundInput(m, r)
			in.Claim = m.Claimed
			return in
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
