package e2e

import (
	"context"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/workflows"
)

// TestEffectsOnTheirRoutesQueues runs the worker binary with
// EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE: a refund's regular activity is
// scheduled on the refund route's own queue. Stripe answers the refund 429
// four times, more than the local first attempt waits out, so the refund
// falls back to it; the worker is killed
// between Stripe's refund and its record, and a worker with the setting
// off takes over: it still polls the route's queue, so the retry left
// there runs, replays the refund under its key, and the customer is
// refunded once, with one receipt (sent by a local attempt: never
// scheduled).
func TestEffectsOnTheirRoutesQueues(t *testing.T) {
	s := newProcStack(t)
	ctx := context.Background()
	first := s.start(t, "EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE=true", failpoint.EnvVar+"="+failpoint.RefundAfterRefund)
	const id = "evt_rq_refund"
	s.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: id}, Kind: stripesim.FaultRateLimit, Times: 4})
	s.refundKilledAfterStripe(t, first, "evt_rq_o", id, 91, 500)

	s.start(t) // the setting off
	s.checkRefundedOnce(t, id)

	// Where each activity was scheduled: the refund by the first worker on
	// the route's queue; the receipt nowhere (its local attempt sent it).
	queues := map[string]string{}
	for it := s.client.GetWorkflowHistory(ctx, "order-refund/"+id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			queues[a.GetActivityType().GetName()] = a.GetTaskQueue().GetName()
		}
	}
	want := map[string]string{
		activities.RefundOrderName:       workflows.RouteQueue(s.cfg.TaskQueue, "order-refund"),
		activities.SendRefundReceiptName: "",
	}
	for name, q := range want {
		if queues[name] != q {
			t.Errorf("%s scheduled on %q, want %q (all: %v)", name, queues[name], q, queues)
		}
	}
}
