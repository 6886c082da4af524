package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

func events(ids ...string) []store.OutboxEvent {
	out := make([]store.OutboxEvent, len(ids))
	for i, id := range ids {
		out[i] = store.OutboxEvent{EventID: id, Topic: "order.paid", Payload: []byte(`{"id":"` + id + `"}`)}
	}
	return out
}

func tracedContext() (context.Context, trace.SpanContext) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(context.Background(), sc), sc
}

// TestUnroutableEventIsNotPublished: with no queue bound, RabbitMQ confirms
// the mandatory publish (ack=true) and returns it: the event must count as
// failed, its row left unpublished.
func TestUnroutableEventIsNotPublished(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	p := rabbitmq.NewEventPublisher(cfg.URL, rabbitmq.EventsTopology{Exchange: cfg.Exchange})
	defer p.Close()
	_, err := p.Publish(context.Background(), events("evt_nowhere")[0])
	if !errors.Is(err, rabbitmq.ErrReturned) {
		t.Fatalf("Publish to an exchange without queues = %v, want ErrReturned", err)
	}
	if s := p.Stats(); s.Returned != 1 || s.Published != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPublishedEventCarriesItsIDAndTrace: a stored event has message_id =
// event ID and the traceparent of the publishing context; in a batch where
// one message is returned, only the others count as stored.
func TestPublishedEventCarriesItsIDAndTrace(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	topo := rabbitmq.EventsTopology{Exchange: cfg.Exchange, Queue: cfg.Queue}
	p := rabbitmq.NewEventPublisher(cfg.URL, topo)
	defer p.Close()
	ctx, sc := tracedContext()
	ids := []string{"evt_1", "evt_2"}
	for _, e := range events(ids...) {
		if _, err := p.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	ch := rabbittest.Channel(t, cfg.URL)
	var got []amqp.Delivery
	eventually(t, "two events in the queue", func() bool {
		d, ok, err := ch.Get(cfg.Queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, d)
		}
		return len(got) == 2
	})
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	for i, d := range got {
		if d.MessageId != ids[i] || d.Headers["traceparent"] != want || d.DeliveryMode != amqp.Persistent {
			t.Fatalf("event %d: message_id %q traceparent %v mode %d; want %q, %q, persistent", i, d.MessageId, d.Headers["traceparent"], d.DeliveryMode, ids[i], want)
		}
	}

	// A batch mixing a routable and an unroutable message.
	raw := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: cfg.URL})
	defer raw.Close()
	stored, err := raw.Publish(ctx, []rabbitmq.Outgoing{
		{Exchange: cfg.Exchange, RoutingKey: "order.paid", MessageID: "m1", Body: []byte("{}")},
		{Exchange: "amq.direct", RoutingKey: cfg.Queue + ".nowhere", MessageID: "m2", Body: []byte("{}")},
		{Exchange: cfg.Exchange, RoutingKey: "order.paid", MessageID: "m3", Body: []byte("{}")},
	})
	if !errors.Is(err, rabbitmq.ErrReturned) || !stored[0] || stored[1] || !stored[2] {
		t.Fatalf("mixed batch: stored %v, %v", stored, err)
	}
}

// TestPublisherSurvivesABrokerRestart: the publish during the outage fails
// (the event stays unpublished), the next one after it reconnects.
func TestPublisherSurvivesABrokerRestart(t *testing.T) {
	node := rabbittest.StartNode(t)
	p := rabbitmq.NewEventPublisher(node.URL, rabbitmq.EventsTopology{Exchange: "events", Queue: "events"})
	defer p.Close()
	if _, err := p.Publish(context.Background(), events("evt_before")[0]); err != nil {
		t.Fatalf("before: %v", err)
	}
	node.Stop()
	if _, err := p.Publish(context.Background(), events("evt_during")[0]); err == nil {
		t.Fatal("publish during the outage: no error")
	}
	node.Start()
	eventually(t, "a publish after the restart", func() bool {
		_, err := p.Publish(context.Background(), events("evt_during")[0])
		return err == nil
	})
	ch := rabbittest.Channel(t, node.URL)
	time.Sleep(100 * time.Millisecond)
	q, err := ch.QueueDeclarePassive("events", true, false, false, false, nil)
	if err != nil || q.Messages != 2 {
		t.Fatalf("events queue after the restart: %d messages, %v; want 2 (the quorum queue kept the first)", q.Messages, err)
	}
}

// TestRelayThroughRabbitMQ: the outbox relay on the RabbitMQ publisher
// marks an event published once the broker stored it; with no queue bound
// (returned), the row stays unpublished for the next pass.
func TestRelayThroughRabbitMQ(t *testing.T) {
	pool := storetest.NewPool(t)
	st := store.New(pool)
	ctx := context.Background()
	for _, id := range []string{"evt_r1", "evt_r2"} {
		if _, err := pool.Exec(ctx, `INSERT INTO outbox (event_id, topic, payload) VALUES ($1, 'order.paid', '{}')`, id); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rabbittest.Config(t, rabbittest.URL())
	nowhere := rabbitmq.NewEventPublisher(cfg.URL, rabbitmq.EventsTopology{Exchange: cfg.Exchange})
	defer nowhere.Close()
	relay, err := outbox.New(st, nowhere, outbox.Config{Logger: testenv.Logger(t), Lease: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RelayPending(ctx); n != 0 || !errors.Is(err, rabbitmq.ErrReturned) {
		t.Fatalf("relay with nothing bound: %d published, %v", n, err)
	}
	var unpublished int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&unpublished); err != nil || unpublished != 2 {
		t.Fatalf("unpublished rows %d, %v; want 2", unpublished, err)
	}
	time.Sleep(10 * time.Millisecond) // the lease of the failed claim passes
	bound := rabbitmq.NewEventPublisher(cfg.URL, rabbitmq.EventsTopology{Exchange: cfg.Exchange, Queue: cfg.Queue})
	defer bound.Close()
	relay, err = outbox.New(st, bound, outbox.Config{Logger: testenv.Logger(t), Lease: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RelayPending(ctx); n != 2 || err != nil {
		t.Fatalf("relay: %d published, %v; want 2", n, err)
	}
	if q, err := rabbittest.Channel(t, cfg.URL).QueueDeclarePassive(cfg.Queue, true, false, false, false, nil); err != nil || q.Messages != 2 {
		t.Fatalf("events queue: %d, %v", q.Messages, err)
	}
}
