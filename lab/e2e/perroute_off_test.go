package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/tools/testenv"
)

// TestPerRouteTurnedOffLosesNothing is NATS_CONSUMER_PER_ROUTE turned off
// by a deploy. The old worker, with the setting and its backlog wait (one
// start a second, 4 deliveries at once), stops (SIGTERM) while its order
// route's durable holds a backlog the shared consumer acked without
// recording: before the retiring source, those orders were never charged.
// The new worker, without the setting, records that backlog from the
// durable and deletes it: every order is charged once and nothing is
// quarantined.
func TestPerRouteTurnedOffLosesNothing(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = testenv.NATSURL()
	s.cfg.Extra = append(s.cfg.Extra, brokerEnv(j)...)
	old := s.start(t, "NATS_CONSUMER_PER_ROUTE=true", "NATS_ROUTE_BACKLOG_WAITS=true", "EFFECTIVELY_START_RATE=1", "NATS_STARTERS=1", "NATS_HANDLERS=4")

	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_perroute_off_%02d", i)
		j.Publish(t, order(ids[i], int64(300+i), "pm_card_visa"), "")
	}
	ctx := context.Background()
	info := func(durable string) *jetstream.ConsumerInfo {
		c, err := j.JS.Consumer(ctx, j.Stream, durable)
		if err != nil {
			return nil
		}
		return c.CachedInfo()
	}
	testenv.Eventually(t, 60*time.Second, "the shared consumer to skip every order", func() bool {
		ci := info("worker")
		return ci != nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Stream >= n
	})
	old.Stop(30 * time.Second)
	route := info("worker-order-placed")
	if route == nil {
		t.Fatalf("the old worker made no durable for the order route; its logs:\n%s", old.Logs())
	}
	left := route.NumPending + uint64(max(route.NumAckPending, 0))
	if left == 0 {
		t.Fatalf("the route's durable holds nothing after the old worker's stop (%d charged): the test needs a backlog there", len(s.sims.Stripe.Stats().ChargesByMessage))
	}
	t.Logf("the old worker stopped with %d orders left in the route's durable, %d charged", left, len(s.sims.Stripe.Stats().ChargesByMessage))

	s.start(t, "NATS_CONSUMER_PER_ROUTE=false") // the setting off
	testenv.Eventually(t, 120*time.Second, "every order charged", func() bool {
		return len(s.sims.Stripe.Stats().ChargesByMessage) == n
	})
	for _, id := range ids {
		if c := s.sims.Stripe.Stats().ChargesByMessage[id]; c != 1 {
			t.Errorf("%s charged %d times, want 1", id, c)
		}
	}
	testenv.Eventually(t, 120*time.Second, "the route's durable to be deleted", func() bool {
		_, err := j.JS.Consumer(ctx, j.Stream, "worker-order-placed")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	})
	var quarantined int
	if err := s.store.Pool().QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&quarantined); err != nil {
		t.Fatal(err)
	}
	if quarantined != 0 {
		t.Errorf("%d messages quarantined, want none", quarantined)
	}
}
