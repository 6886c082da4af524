package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/testenv"
)

// TestRetiringRecordsWhatTheSharedConsumerSkipped is NATS_CONSUMER_PER_ROUTE
// turned off by a rolling deploy. An old worker (the setting on) stops
// with a backlog in its route's durable: the shared consumer acked those
// messages without recording them. The new worker (the setting off) finds
// the durable, records its backlog, leaves it alone while another old
// worker still pulls from it, and deletes it once none is left; every
// message is recorded, the ones published meanwhile too.
func TestRetiringRecordsWhatTheSharedConsumerSkipped(t *testing.T) {
	defer jetstream.SetRetire(100*time.Millisecond, 3)()
	h := newHarness(t, nil)
	ctx := context.Background()
	sharedAll, route, subject := afterShared(t, h, "evt_ret_before", 500, 1)
	sharedSkip := sharedAll
	sharedSkip.Skip = []string{subject}
	newConsumer := func(cfg jetstream.Config) *jetstream.Consumer {
		c, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Old worker 1 runs only its shared consumer, skipping: its route's
	// durable piles up 20 messages no one records.
	rc := newConsumer(route)
	stopSkip1 := run(t, newConsumer(sharedSkip))
	for i := range 20 {
		h.j.Publish(t, orderMsg(fmt.Sprintf("evt_ret_backlog_%d", i), 600+i), "")
	}
	testenv.Eventually(t, 10*time.Second, "the shared consumer to skip the backlog", func() bool {
		ackPending, pending, _ := h.consumerInfo(t, sharedAll.Durable)
		return ackPending == 0 && pending == 0
	})
	stopSkip1()
	if _, pending, _ := h.consumerInfo(t, route.Durable); pending != 20 {
		t.Fatalf("the route's durable holds %d messages, want the 20 skipped", pending)
	}
	// Old worker 2 is still up: its route consumer and its skipping shared
	// consumer.
	stopOldRoute := run(t, rc)
	stopOldShared := run(t, newConsumer(sharedSkip))

	// A durable with the prefix that effectively did not create is no
	// leftover.
	if _, err := h.j.JS.CreateOrUpdateConsumer(ctx, h.j.Stream, natsjs.ConsumerConfig{Durable: sharedAll.Durable + "-foreign", AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	left, err := jetstream.Leftovers(ctx, h.j.JS, sharedAll)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Durable != route.Durable || left[0].Subject != subject || left[0].Name != "jetstream-order-placed" || left[0].StartAfter != sharedAll.Durable {
		t.Fatalf("Leftovers = %+v, want the route's durable alone", left)
	}
	// The new worker: its shared consumer records every subject, and it
	// retires the route's durable.
	retiring, err := jetstream.NewRetiring(ctx, h.in, h.j.JS, left[0])
	if err != nil {
		t.Fatal(err)
	}
	run(t, newConsumer(sharedAll))
	run(t, retiring)
	for i := range 20 {
		h.j.Publish(t, orderMsg(fmt.Sprintf("evt_ret_mixed_%d", i), 700+i), "")
	}
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE message_id LIKE 'evt_ret_backlog_%' OR message_id LIKE 'evt_ret_mixed_%'`, 40)
	// Old worker 2 pulls from the durable: it is not deleted, however
	// many times the new worker looks.
	time.Sleep(30 * 100 * time.Millisecond)
	if retiring.Retired() {
		t.Fatal("the route's durable was deleted while a worker with the setting on pulled from it")
	}

	// The last old worker stops; the durable goes once it is drained.
	stopOldRoute()
	stopOldShared()
	for i := range 20 {
		h.j.Publish(t, orderMsg(fmt.Sprintf("evt_ret_after_%d", i), 800+i), "")
	}
	testenv.Eventually(t, 15*time.Second, "the route's durable to be deleted", retiring.Retired)
	if _, err := h.j.JS.Consumer(ctx, h.j.Stream, route.Durable); !errors.Is(err, natsjs.ErrConsumerNotFound) {
		t.Fatalf("the route's durable after its retirement: %v, want it gone", err)
	}
	h.j.Publish(t, orderMsg("evt_ret_last", 900), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE message_id LIKE 'evt_ret_%'`, 1+20+20+20+1)
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d messages quarantined, want none", n)
	}
}

// TestRetiringWithoutABacklog is the same switch with nothing left in the
// route's durable and no worker with the setting on: it is deleted after
// the quiet checks, and a worker that finds none has nothing to retire.
func TestRetiringWithoutABacklog(t *testing.T) {
	defer jetstream.SetRetire(50*time.Millisecond, 3)()
	h := newHarness(t, nil)
	ctx := context.Background()
	sharedAll, route, _ := afterShared(t, h, "evt_ret0_before", 1000, 1)
	if _, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, route); err != nil {
		t.Fatal(err)
	}
	retiring := runRetiring(t, h, sharedAll)
	testenv.Eventually(t, 10*time.Second, "the route's durable to be deleted", retiring.Retired)
	if left, err := jetstream.Leftovers(ctx, h.j.JS, sharedAll); err != nil || len(left) != 0 {
		t.Fatalf("Leftovers after the retirement = %v, %v; want none", left, err)
	}
	// A second worker that attached before the deletion sees it gone.
	if _, err := jetstream.NewRetiring(ctx, h.in, h.j.JS, route); !errors.Is(err, natsjs.ErrConsumerNotFound) {
		t.Fatalf("NewRetiring on a deleted durable: %v, want ErrConsumerNotFound", err)
	}
}

// TestRouteConsumerCreatedAgainWhenDeleted is a worker with
// NATS_CONSUMER_PER_ROUTE whose route's durable another worker deleted: it
// creates it again and goes on recording the route's messages.
func TestRouteConsumerCreatedAgainWhenDeleted(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, route, _ := afterShared(t, h, "evt_again_before", 1100, 1)
	rc, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, route)
	if err != nil {
		t.Fatal(err)
	}
	run(t, rc)
	h.j.Publish(t, orderMsg("evt_again_1", 1200), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE source = 'jetstream-order-placed'`, 1)
	if err := h.j.JS.DeleteConsumer(ctx, h.j.Stream, route.Durable); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the route's durable to be created again", func() bool {
		_, err := h.j.JS.Consumer(ctx, h.j.Stream, route.Durable)
		return err == nil
	})
	h.j.Publish(t, orderMsg("evt_again_2", 1201), "")
	waitCount(t, h, `SELECT count(*) FROM inbox WHERE source = 'jetstream-order-placed'`, 2)
}

// TestRetiringKeepsItsDeadLetters: a route's durable took a message the
// shared consumer skipped, and a worker died holding its last delivery, so
// the broker captured its advisory in the durable's dead letters. A worker
// with NATS_CONSUMER_PER_ROUTE off retires the durable while Postgres is
// out of reach, so the dead letter cannot be recorded yet. The durable
// stays, its dead-letter reader with it, until Postgres is back and the
// message is recorded; then it goes.
func TestRetiringKeepsItsDeadLetters(t *testing.T) {
	defer jetstream.SetRetire(50*time.Millisecond, 3)()
	gate := newGate(0, 0)
	h := newHarness(t, gate)
	ctx := context.Background()
	shared := h.j.ConsumerConfig(t, time.Second, 2)
	subject, err := jetstream.PublishSubject(h.j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	route := shared
	route.Name, route.Durable, route.Subject, route.StartAfter = "jetstream-order-placed", shared.Durable+"-order-placed", subject, shared.Durable
	if _, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, route); err != nil {
		t.Fatal(err)
	}
	skipping := shared
	skipping.Skip = []string{subject}
	sc, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, skipping)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, sc)
	h.j.Publish(t, orderMsg("evt_ret_dead", 3100), "")
	testenv.Eventually(t, 10*time.Second, "the shared consumer to skip it", func() bool {
		ackPending, pending, _ := h.consumerInfo(t, shared.Durable)
		return ackPending == 0 && pending == 0
	})
	stop()
	killedHolding(t, h.j.Conn.ConnectedUrl(), h.j.Stream, route.Durable, 2, time.Second)
	giveUp(ctx, t, h.j.JS, h.j.Stream, route.Durable)

	gate.refuse.Store(true)
	retiring := runRetiring(t, h, shared)
	// Many times the quiet checks: the durable is quiet, only its dead
	// letter is left.
	time.Sleep(2 * time.Second)
	if retiring.Retired() {
		t.Fatal("the route's durable was deleted with its dead letter unrecorded: no reader is left for it")
	}
	gate.refuse.Store(false)
	testenv.Eventually(t, 20*time.Second, "the route's durable to be deleted once its dead letter is recorded", retiring.Retired)
	if n := h.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_ret_dead'`) +
		h.count(t, `SELECT count(*) FROM quarantine WHERE message_id = 'evt_ret_dead'`); n != 1 {
		t.Fatalf("evt_ret_dead in the inbox and the quarantine: %d rows, want 1", n)
	}
	if n := deadLettersLeft(t, h, route.Durable); n != 0 {
		t.Errorf("%d dead letters left unsettled, want 0", n)
	}
}

// runRetiring runs, as a worker without NATS_CONSUMER_PER_ROUTE would, the
// one route durable shared's consumers left.
func runRetiring(t *testing.T, h *harness, shared jetstream.Config) *jetstream.Retiring {
	t.Helper()
	ctx := context.Background()
	left, err := jetstream.Leftovers(ctx, h.j.JS, shared)
	if err != nil || len(left) != 1 {
		t.Fatalf("Leftovers = %v, %v; want the route's durable", left, err)
	}
	retiring, err := jetstream.NewRetiring(ctx, h.in, h.j.JS, left[0])
	if err != nil {
		t.Fatal(err)
	}
	run(t, retiring)
	return retiring
}
