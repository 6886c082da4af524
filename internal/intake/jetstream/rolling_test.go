package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/testenv"
)

// TestRollingDeployConsumerHandsBackANewType is a rolling deploy that adds
// order.refund_requested, seen from the JetStream consumer: an old worker
// that receives a message of the new type hands it back (nak) instead of
// quarantining and acking it, so that a new worker records and starts it;
// only on its last delivery does the old worker quarantine it (kept, with
// its reason, for `quarantine retry`).
func TestRollingDeployConsumerHandsBackANewType(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	oldRoutes, err := route.New(route.OrderPlaced())
	if err != nil {
		t.Fatal(err)
	}
	oldIn, err := intake.New(store.New(h.db), h.tc, intake.Config{Routes: oldRoutes, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := h.j.ConsumerConfig(t, 300*time.Millisecond, 3)
	consumer := func(in *intake.Intake) *jetstream.Consumer {
		c, err := jetstream.NewConsumer(ctx, in, h.j.JS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	quarantined := func() []store.QuarantineEntry {
		q, err := store.New(h.db).QuarantineList(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}

	old := consumer(oldIn)
	stopOld := run(t, old)
	h.j.Publish(t, refundRequested("evt_roll_js1", 770), "")
	testenv.Eventually(t, 5*time.Second, "the old worker to hand the new type back", func() bool {
		return old.Stats().Retries >= 1 || len(quarantined()) > 0
	})
	stopOld()
	if q := quarantined(); len(q) != 0 {
		t.Fatalf("the old worker quarantined %s (%s: %s); want it handed back for a new worker", q[0].MessageID, q[0].Reason, q[0].Detail)
	}
	stopNew := run(t, consumer(h.in))
	testenv.Eventually(t, 10*time.Second, "the new worker to start the refund", func() bool {
		return h.tc.Starts()["order-refund/evt_roll_js1"] == 1
	})
	stopNew()

	// No new worker comes: on its last delivery the old one keeps it.
	old = consumer(oldIn)
	stopOld = run(t, old)
	defer stopOld()
	h.j.Publish(t, refundRequested("evt_roll_js2", 771), "")
	testenv.Eventually(t, 10*time.Second, "the last delivery to be quarantined", func() bool { return len(quarantined()) == 1 })
	if q := quarantined()[0]; q.MessageID != "evt_roll_js2" || q.Reason != store.ReasonInvalid || old.Stats().Retries != 2 {
		t.Errorf("quarantine = %s (%s), %d naks; want evt_roll_js2 as invalid after 2 naks", q.MessageID, q.Reason, old.Stats().Retries)
	}
}

func refundRequested(id string, orderID int64) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.refund_requested", "data": {"order_id": %d, "amount": 500, "reason": "requested_by_customer"}}`, id, orderID)
}
