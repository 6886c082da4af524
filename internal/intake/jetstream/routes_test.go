package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake/jetstream"
)

// TestRouteConsumerTakesOverFromTheSharedOne is NATS_CONSUMER_PER_ROUTE on
// a stream the shared consumer has been consuming: the route's new
// durable starts after the shared one's ack floor (what it recorded is
// not delivered again), records its route's messages from then on, and
// the shared consumer acks that subject without recording it while it
// still records the others (bytes that are no message, quarantined as
// before).
func TestRouteConsumerTakesOverFromTheSharedOne(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	// Before: the shared consumer records two orders. After: a route's
	// consumer beside it, and the shared one skipping the route's subject.
	shared, route, subject := afterShared(t, h, "evt_before", 100, 2)
	rc, sc := routeAndSkipping(t, h, shared, route, subject)
	run(t, rc)
	run(t, sc)
	for i := range 3 {
		h.j.Publish(t, orderMsg(fmt.Sprintf("evt_after_%d", i), 200+i), "")
	}
	other, err := jetstream.PublishSubject(h.j.Subject, "garbage")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.j.JS.Publish(ctx, other, []byte(`not a message`)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE source = 'jetstream-order-placed'`, 3)
	waitCount(t, h, `SELECT count(*) FROM quarantine WHERE source = 'jetstream'`, 1)
	time.Sleep(500 * time.Millisecond) // anything more would have come by now
	if n := h.count(t, `SELECT count(*) FROM inbox WHERE source = 'jetstream'`); n != 2 {
		t.Errorf("the shared consumer recorded %d messages, want the 2 from before: it recorded the route's", n)
	}
	if n := h.count(t, `SELECT coalesce(sum(duplicates), 0) FROM inbox`); n != 0 {
		t.Errorf("%d duplicates: the route's consumer started before the shared one's ack floor", n)
	}
	for _, durable := range []string{shared.Durable, route.Durable} {
		if ackPending, pending, _ := h.consumerInfo(t, durable); ackPending != 0 || pending != 0 {
			t.Errorf("consumer %s: %d unacked, %d pending; want every message settled", durable, ackPending, pending)
		}
	}
}

// afterShared has the shared consumer record n orders (IDs prefix_0…,
// orders from first), stops it, and returns its config with the config of
// the order route's own consumer, which starts after the shared one's ack
// floor, and the route's subject.
func afterShared(t *testing.T, h *harness, prefix string, first, n int) (shared, route jetstream.Config, subject string) {
	t.Helper()
	shared = h.j.ConsumerConfig(t, 5*time.Second, 5)
	for i := range n {
		h.j.Publish(t, orderMsg(fmt.Sprintf("%s_%d", prefix, i), first+i), "")
	}
	c, err := jetstream.NewConsumer(context.Background(), h.in, h.j.JS, shared)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE source = 'jetstream'`, int64(n))
	stop()
	if subject, err = jetstream.PublishSubject(h.j.Subject, "order.placed"); err != nil {
		t.Fatal(err)
	}
	route = shared
	route.Name, route.Durable, route.Subject, route.StartAfter = "jetstream-order-placed", shared.Durable+"-order-placed", subject, shared.Durable
	return shared, route, subject
}

func waitCount(t *testing.T, h *harness, q string, want int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := h.count(t, q)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", q, n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRouteConsumerCreatedMeanwhileByAnotherWorker is two workers starting
// together with NATS_CONSUMER_PER_ROUTE: each finds the route's durable
// missing, and the other creates it first, from another start (it saw no
// shared consumer). The broker refuses to change a start; this worker
// takes the durable as it is instead of exiting.
func TestRouteConsumerCreatedMeanwhileByAnotherWorker(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, route, _ := afterShared(t, h, "evt_race_before", 300, 1)
	// The other worker's durable: from the stream's first message.
	other := route
	other.StartAfter = ""
	created := false
	restore := jetstream.SetBeforeCreate(func() {
		if created {
			return
		}
		created = true
		restoreInner := jetstream.SetBeforeCreate(func() {})
		defer restoreInner()
		if _, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, other); err != nil {
			t.Errorf("the other worker's create: %v", err)
		}
	})
	rc, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, route)
	restore()
	if !created {
		t.Fatal("the other worker's create never ran")
	}
	if err != nil {
		t.Fatalf("a worker that lost the race to create its route's durable: %v", err)
	}
	// It consumes from the durable's start, the stream's first message: the
	// one recorded before is a copy, the new one a new row.
	run(t, rc)
	h.j.Publish(t, orderMsg("evt_race_after", 301), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE source = 'jetstream-order-placed'`, 1)
	waitCount(t, h, `SELECT coalesce(sum(duplicates), 0) FROM inbox WHERE message_id = 'evt_race_before_0'`, 1)
}

// TestSkippedOnlyWhileTheRouteDurableIsInUse: a worker with
// NATS_CONSUMER_PER_ROUTE skips its route's subject on the shared consumer
// while the route's durable is pulled from. Once the durable is gone (a
// worker without the setting retired it while this one was cut off from
// NATS), the shared consumer records the route's messages itself instead of
// skipping them into a durable that no longer exists.
func TestSkippedOnlyWhileTheRouteDurableIsInUse(t *testing.T) {
	defer jetstream.SetSkipFresh(200 * time.Millisecond)()
	h := newHarness(t, nil)
	ctx := context.Background()
	shared, route, subject := afterShared(t, h, "evt_use_before", 300, 1)
	rc, sc := routeAndSkipping(t, h, shared, route, subject)
	stopRoute := run(t, rc)
	run(t, sc)
	h.j.Publish(t, orderMsg("evt_use_pulled", 310), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE message_id = 'evt_use_pulled' AND source = 'jetstream-order-placed'`, 1)

	// The route's consumer is cut off and its durable deleted.
	stopRoute()
	if err := h.j.JS.DeleteConsumer(ctx, h.j.Stream, route.Durable); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the shared consumer's view
	h.j.Publish(t, orderMsg("evt_use_gone", 311), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE message_id = 'evt_use_gone' AND source = 'jetstream'`, 1)
}

// routeAndSkipping makes a worker's consumers with NATS_CONSUMER_PER_ROUTE:
// the route's own, and the shared one skipping the route's subject.
func routeAndSkipping(t *testing.T, h *harness, shared, route jetstream.Config, subject string) (rc, sc *jetstream.Consumer) {
	t.Helper()
	ctx := context.Background()
	rc, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, route)
	if err != nil {
		t.Fatal(err)
	}
	shared.Skip = []string{subject}
	if sc, err = jetstream.NewConsumer(ctx, h.in, h.j.JS, shared); err != nil {
		t.Fatal(err)
	}
	return rc, sc
}
