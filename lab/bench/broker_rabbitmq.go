package bench

import (
	"context"
	"fmt"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// rabbitBroker is a uniquely named quorum queue (and its exchange and
// dead-letter pair) on the RabbitMQ server at $RABBITMQ_URL (default the
// local one), with the worker's events relayed to the same server (NATS
// off). Deleted at the end.
type rabbitBroker struct {
	cfg     rabbitmq.Config
	events  rabbitmq.EventsTopology
	conn    *amqp.Connection
	version string
	pub     *rabbitmq.Publisher
}

func newRabbitBroker(ctx context.Context) (_ *rabbitBroker, err error) {
	url := os.Getenv("RABBITMQ_URL")
	if url == "" {
		url = rabbitmq.DefaultURL
	}
	tag := "bench." + randomTag(5)
	b := &rabbitBroker{
		// The dead-letter pair takes the names the worker derives from the
		// queue (<queue>.dlx, <queue>.dead): its declare must match ours.
		cfg:    rabbitmq.Config{URL: url, Exchange: tag + ".x", Queue: tag + ".q"},
		events: rabbitmq.EventsTopology{Exchange: tag + ".events", Queue: tag + ".events"},
	}
	if b.conn, err = rabbitmq.Dial(url, "effectively bench"); err != nil {
		return nil, fmt.Errorf("RabbitMQ is required at %s (rabbitmq-server -detached): %w", url, err)
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if v, err := rabbitmq.ServerVersion(b.conn.Properties); err == nil {
		b.version = "rabbitmq " + v.String()
	}
	err = rabbitmq.Bounded(ctx, b.conn, func() error {
		ch, err := b.conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		if err := rabbitmq.Declare(ch, b.cfg); err != nil {
			return err
		}
		return b.events.Declare(ch)
	})
	if err != nil {
		return nil, err
	}
	b.pub = rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: url, Name: "effectively bench publisher"})
	return b, nil
}

func (b *rabbitBroker) Name() string    { return "rabbitmq" }
func (b *rabbitBroker) Version() string { return b.version }
func (b *rabbitBroker) NATSURL() string { return "off" }

func (b *rabbitBroker) WorkerEnv() []string {
	return []string{
		"EFFECTIVELY_SOURCES=rabbitmq", "RABBITMQ_URL=" + b.cfg.URL,
		"RABBITMQ_EXCHANGE=" + b.cfg.Exchange, "RABBITMQ_QUEUE=" + b.cfg.Queue,
		"RABBITMQ_EVENTS_EXCHANGE=" + b.events.Exchange, "RABBITMQ_EVENTS_QUEUE=" + b.events.Queue,
	}
}

// Publish publishes with confirms; RabbitMQ has no publish dedup, so
// dedupID only rides as message_id.
func (b *rabbitBroker) Publish(ctx context.Context, raw []byte, dedupID string) error {
	_, err := b.pub.Publish(ctx, []rabbitmq.Outgoing{{Exchange: b.cfg.Exchange, RoutingKey: "order.placed", MessageID: dedupID, Body: raw}})
	return err
}

// PublishBurst publishes in batches of 500, each confirmed before the next.
func (b *rabbitBroker) PublishBurst(ctx context.Context, raws [][]byte) error {
	for len(raws) > 0 {
		n := min(len(raws), 500)
		msgs := make([]rabbitmq.Outgoing, n)
		for i, raw := range raws[:n] {
			msgs[i] = rabbitmq.Outgoing{Exchange: b.cfg.Exchange, RoutingKey: "order.placed", Body: raw}
		}
		if _, err := b.pub.Publish(ctx, msgs); err != nil {
			return err
		}
		raws = raws[n:]
	}
	return nil
}

// Subscribed reports a consumer on the queue.
func (b *rabbitBroker) Subscribed(ctx context.Context) bool {
	var q amqp.Queue
	err := rabbitmq.Bounded(ctx, b.conn, func() error {
		ch, err := b.conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		q, err = ch.QueueDeclarePassive(b.cfg.Queue, true, false, false, false, nil)
		return err
	})
	return err == nil && q.Consumers > 0
}

func (b *rabbitBroker) Close() {
	if b.pub != nil {
		_ = b.pub.Close()
	}
	if b.conn == nil {
		return
	}
	_ = rabbitmq.Remove(context.Background(), b.conn, []string{b.cfg.Queue, b.cfg.Queue + ".dead", b.events.Queue},
		[]string{b.cfg.Exchange, b.cfg.Queue + ".dlx", b.events.Exchange})
	_ = rabbitmq.CloseConn(b.conn)
	b.conn = nil
}
