package soak

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/kafkatest"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/rabbittest"
	"github.com/effectively/effectively/tools/testenv"
)

// soakBroker is one broker's hooks for the soak: the worker processes'
// environment, the soak's publish, and a restart while messages flow.
type soakBroker struct {
	// natsURL is the workers' NATS_URL: the outbox relay publishes there
	// whatever the source (empty: off).
	natsURL string
	// env selects the source (EFFECTIVELY_SOURCES) and its variables.
	env     []string
	send    func(ctx context.Context, raw []byte) error
	restart func(ctx context.Context) error
}

// newBroker returns the hooks of broker (-broker, make soak BROKER=…). A
// broker without hooks here fails the soak; it is never skipped.
func newBroker(t *testing.T, broker string) soakBroker {
	t.Helper()
	switch broker {
	case "nats":
		return natsBroker(t)
	case "rabbitmq":
		return rabbitBroker(t)
	case "kafka":
		return kafkaBroker(t)
	default:
		t.Fatalf("soak: unknown broker %q: use nats, kafka or rabbitmq", broker)
	}
	return soakBroker{}
}

// natsBroker is a nats-server of the soak's own (so that it can be
// restarted) with the worker's streams on it.
func natsBroker(t *testing.T) soakBroker {
	srv := natstest.Start(t, "")
	j := testenv.NewJetStreamAt(t, srv.URL("nats", "127.0.0.1"), testenv.JetStreamOptions{})
	return soakBroker{
		natsURL: srv.URL("nats", "127.0.0.1"),
		env: []string{
			"EFFECTIVELY_SOURCES=jetstream",
			"NATS_STREAM=" + j.Stream, "NATS_SUBJECT=" + j.Subject, "NATS_CONSUMER=soak",
			"NATS_ACK_WAIT=5s", "NATS_BACKOFF=none", "NATS_MAX_DELIVER=20",
			"NATS_EVENTS_STREAM=" + j.EventsStream, "NATS_EVENTS_PREFIX=" + j.EventsPrefix,
		},
		send: func(ctx context.Context, raw []byte) error {
			subject, err := subjectOf(j.Subject, raw)
			if err != nil {
				return err
			}
			_, err = j.JS.Publish(ctx, subject, raw)
			return err
		},
		restart: func(context.Context) error {
			srv.Restart(t)
			return nil
		},
	}
}

// subjectOf is the subject a producer publishes raw on, as `starter
// publish` does: its type's (jetstream.PublishSubject), so that a consumer
// of NATS_CONSUMER_PER_ROUTE gets its route's messages, and "invalid" for a
// message the routes cannot decode, which NATS_CONSUMER then quarantines.
func subjectOf(filter string, raw []byte) (string, error) {
	typ := "invalid"
	if m, err := route.Default().Decode(raw); err == nil {
		typ = m.Type
	}
	return jetstream.PublishSubject(filter, typ)
}

// rabbitBroker is a RabbitMQ node of the soak's own (so that it can be
// restarted), the workers consuming its quorum queue and relaying the
// outbox to it (NATS off). Messages are published with confirms and no
// message_id dedup of any kind: every duplicate reaches the source.
func rabbitBroker(t *testing.T) soakBroker {
	node := rabbittest.StartNode(t)
	cfg := rabbitmq.Config{URL: node.URL, MaxDeliver: 20}
	// The workers declare the same topology; declaring it first means no
	// publish before the first worker's start is unroutable.
	if err := rabbitmq.Declare(rabbittest.Channel(t, node.URL), cfg); err != nil {
		t.Fatal(err)
	}
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: node.URL, Name: "soak publisher"})
	t.Cleanup(func() { _ = pub.Close() })
	return soakBroker{
		env: []string{
			"EFFECTIVELY_SOURCES=rabbitmq", "RABBITMQ_URL=" + node.URL, "RABBITMQ_MAX_DELIVER=20",
		},
		// Retried for up to a minute: a broker restart takes several
		// seconds, longer than the soak's own retries.
		send: func(ctx context.Context, raw []byte) error {
			deadline := time.Now().Add(time.Minute)
			for {
				_, err := pub.Publish(ctx, []rabbitmq.Outgoing{{Exchange: rabbitmq.DefaultExchange, RoutingKey: "order.placed", Body: raw}})
				if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
					if err != nil {
						return fmt.Errorf("publish to rabbitmq: %w", err)
					}
					return nil
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
		restart: func(context.Context) error {
			node.Restart()
			return nil
		},
	}
}

// kafkaBroker is kfake as a separate process of the soak's own, persisting
// with fsync, so that a restart is a SIGKILL and a start on the same port
// and data. The workers consume it alone (NATS off) and their outbox relay
// produces to it.
func kafkaBroker(t *testing.T) soakBroker {
	const topic = "soak.messages"
	p := kafkatest.StartProcess(t, 6, topic, "effectively.events.order.paid")
	// The producer retries through a restart (kgo retries a produce until
	// its delivery timeout).
	prod := kafkatest.Producer(t, p.Addr(), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(60*time.Second))
	return soakBroker{
		env: []string{
			"EFFECTIVELY_SOURCES=kafka",
			"KAFKA_BROKERS=" + p.Addr(), "KAFKA_TOPIC=" + topic, "KAFKA_GROUP=soak", "OUTBOX_BROKER=kafka",
		},
		send: func(ctx context.Context, raw []byte) error {
			return prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: raw}).FirstErr()
		},
		restart: func(context.Context) error { return p.RestartErr() },
	}
}
