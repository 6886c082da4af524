package config

import (
	"fmt"
	"strings"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// RabbitMQ is the RabbitMQ source (run when EFFECTIVELY_SOURCES lists
// rabbitmq) and, with NATS off, where the outbox relay publishes
// (RABBITMQ_*).
type RabbitMQ struct {
	// Source is the consumer (RABBITMQ_URL, RABBITMQ_EXCHANGE,
	// RABBITMQ_QUEUE, RABBITMQ_MESSAGE_TTL, RABBITMQ_MAX_DELIVER,
	// RABBITMQ_PREFETCH, RABBITMQ_HANDLERS).
	Source rabbitmq.Config
	// Events is where outbox events go (RABBITMQ_EVENTS_EXCHANGE,
	// RABBITMQ_EVENTS_QUEUE), when NATS is off.
	Events rabbitmq.EventsTopology
}

// Defaults of the RabbitMQ events topology.
const (
	DefaultRabbitMQEventsExchange = "effectively.events"
	DefaultRabbitMQEventsQueue    = "effectively.events"
)

// ifRabbitMQ runs check only when the RabbitMQ source is on.
func ifRabbitMQ(check func(Config) error) func(Config) error {
	return func(c Config) error {
		if !c.HasSource(SourceRabbitMQ) {
			return nil
		}
		return check(c)
	}
}

// rabbitmqVariables are the RABBITMQ_* rows of the table.
var rabbitmqVariables = []variable{
	str("RABBITMQ_URL", rabbitmq.DefaultURL, "RabbitMQ.Source.URL",
		"the RabbitMQ broker (`amqp://user:password@host:5672/vhost`) of the `rabbitmq` source and of `starter publish --broker rabbitmq`; with `NATS_URL=off` the outbox relay publishes there too. See [intake](intake.md)",
		func(c *Config) *string { return &c.RabbitMQ.Source.URL }).checked(ifRabbitMQ(func(c Config) error {
		// The scheme in any case, as amqp091-go takes it; the value is
		// never echoed whole (it carries the password).
		if u := strings.ToLower(c.RabbitMQ.Source.URL); !strings.HasPrefix(u, "amqp://") && !strings.HasPrefix(u, "amqps://") {
			return fmt.Errorf("%s: want amqp:// or amqps://", redactURL(c.RabbitMQ.Source.URL))
		}
		return nil
	})),
	str("RABBITMQ_EXCHANGE", rabbitmq.DefaultExchange, "RabbitMQ.Source.Exchange",
		"topic exchange the queue is bound to with `#`; `starter publish --broker rabbitmq` publishes there with the message type as routing key",
		func(c *Config) *string { return &c.RabbitMQ.Source.Exchange }),
	str("RABBITMQ_QUEUE", rabbitmq.DefaultQueue, "RabbitMQ.Source.Queue",
		"quorum queue shared by all worker processes, declared with the TTL and limit below, a dead-letter exchange `<queue>.dlx` and queue `<queue>.dead` (at-least-once dead-lettering; the worker quarantines what lands there)",
		func(c *Config) *string { return &c.RabbitMQ.Source.Queue }),
	{name: "RABBITMQ_MESSAGE_TTL", def: short(rabbitmq.DefaultMessageTTL), field: "RabbitMQ.Source.MessageTTL",
		load: func(c *Config, v string, _ bool) error {
			if v == "none" {
				c.RabbitMQ.Source.MessageTTL = -1
				return nil
			}
			return parseInto(&c.RabbitMQ.Source.MessageTTL, v, rabbitmq.DefaultMessageTTL)
		},
		check: ifRabbitMQ(func(c Config) error {
			if _, err := c.RabbitMQ.Source.Horizon(); err != nil {
				return fmt.Errorf("%s: %w", short(c.RabbitMQ.Source.MessageTTL), err)
			}
			return nil
		}),
		doc: "the queue's `x-message-ttl`: the source's redelivery horizon (`RETENTION` must outlive it); `none` is refused, since a message could then come back at any time"},
	num("RABBITMQ_MAX_DELIVER", rabbitmq.DefaultMaxDeliver, "RabbitMQ.Source.MaxDeliver",
		"the delivery (by `x-delivery-count`) on which a message that cannot be recorded is quarantined as `max_deliver`; also the queue's `x-delivery-limit`",
		func(c *Config) *int { return &c.RabbitMQ.Source.MaxDeliver }).checked(ifRabbitMQ(func(c Config) error { return atLeast(c.RabbitMQ.Source.MaxDeliver, 1) })),
	num("RABBITMQ_PREFETCH", rabbitmq.DefaultPrefetch, "RabbitMQ.Source.Prefetch",
		"per-channel prefetch (never global: global QoS closes a quorum queue's connection)",
		func(c *Config) *int { return &c.RabbitMQ.Source.Prefetch }).checked(ifRabbitMQ(func(c Config) error { return within(c.RabbitMQ.Source.Prefetch, 1, 65535) })),
	num("RABBITMQ_HANDLERS", rabbitmq.DefaultHandlers, "RabbitMQ.Source.Handlers",
		"deliveries settled at once (record, then ack); ≥ 1",
		func(c *Config) *int { return &c.RabbitMQ.Source.Handlers }).checked(ifRabbitMQ(func(c Config) error { return atLeast(c.RabbitMQ.Source.Handlers, 1) })),
	str("RABBITMQ_EVENTS_EXCHANGE", DefaultRabbitMQEventsExchange, "RabbitMQ.Events.Exchange",
		"with `NATS_URL=off`: topic exchange of the outbox events (routing key = topic, `message_id` = event ID), published with confirms; a returned event stays unpublished",
		func(c *Config) *string { return &c.RabbitMQ.Events.Exchange }),
	str("RABBITMQ_EVENTS_QUEUE", DefaultRabbitMQEventsQueue, "RabbitMQ.Events.Queue",
		"quorum queue bound to the events exchange with `#`, so that no event is unroutable",
		func(c *Config) *string { return &c.RabbitMQ.Events.Queue }),
}
