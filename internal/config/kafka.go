package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/intake/kafka"
)

// Kafka configures intake from a Kafka topic and, with OUTBOX_BROKER=kafka,
// the outbox relay's producer. Plaintext connections only (no TLS or SASL
// yet).
type Kafka struct {
	// Brokers are the seed brokers (KAFKA_BROKERS); empty is off: no Kafka
	// source, no Kafka relay.
	Brokers []string
	// Consumer is the source (KAFKA_TOPIC, KAFKA_GROUP,
	// KAFKA_MAX_POLL_RECORDS, KAFKA_HANDLERS); its Brokers are Brokers.
	Consumer kafka.Config
	// EventsPrefix prefixes an event's topic to name its Kafka topic
	// (KAFKA_EVENTS_PREFIX).
	EventsPrefix string
}

// Enabled reports whether the Kafka side runs at all.
func (k Kafka) Enabled() bool { return len(k.Brokers) > 0 }

// Outbox brokers, as OUTBOX_BROKER names them.
const (
	OutboxNATS     = "nats"
	OutboxKafka    = "kafka"
	OutboxRabbitMQ = "rabbitmq"
)

// kafkaVariables are the Kafka rows of the table of variables; init
// appends them to it (they depend on no other variable).
var kafkaVariables = []variable{
	{name: "KAFKA_BROKERS", field: "Kafka.Brokers", docDefault: "off",
		load: func(c *Config, v string, _ bool) error {
			c.Kafka.Brokers = nil
			if v != "off" {
				c.Kafka.Brokers = list(v)
			}
			c.Kafka.Consumer.Brokers = c.Kafka.Brokers
			return nil
		},
		doc: "comma-separated `host:port` seed brokers (plaintext) of the `kafka` source (`EFFECTIVELY_SOURCES`) and of `OUTBOX_BROKER=kafka`; `BROKER=kafka make run` runs kfake on 127.0.0.1:9092"},
	str("KAFKA_TOPIC", kafka.DefaultTopic, "Kafka.Consumer.Topic",
		"topic the Kafka source consumes; its `retention.ms` + `segment.ms` is its redelivery horizon (`retention.ms=-1` and compacted topics are refused at start)",
		func(c *Config) *string { return &c.Kafka.Consumer.Topic }),
	str("KAFKA_GROUP", kafka.DefaultGroup, "Kafka.Consumer.Group", "consumer group, shared by all worker processes",
		func(c *Config) *string { return &c.Kafka.Consumer.Group }),
	num("KAFKA_MAX_POLL_RECORDS", kafka.DefaultMaxPollRecords, "Kafka.Consumer.MaxPollRecords",
		"records per batch; a rebalance waits for the batch in hand",
		func(c *Config) *int { return &c.Kafka.Consumer.MaxPollRecords }).checked(ifKafka(func(c Config) error {
		return within(c.Kafka.Consumer.MaxPollRecords, 1, 10000)
	})),
	num("KAFKA_HANDLERS", kafka.DefaultHandlers, "Kafka.Consumer.Handlers", "records of a batch recorded at once (their inbox inserts share transactions)",
		func(c *Config) *int { return &c.Kafka.Consumer.Handlers }).checked(ifKafka(func(c Config) error { return atLeast(c.Kafka.Consumer.Handlers, 1) })),
	str("KAFKA_EVENTS_PREFIX", outbox.DefaultKafkaTopicPrefix, "Kafka.EventsPrefix",
		"with `OUTBOX_BROKER=kafka`, events go to topic `<prefix>.<topic>` (e.g. `effectively.events.order.paid`), keyed by event ID",
		func(c *Config) *string { return &c.Kafka.EventsPrefix }),
	{name: "OUTBOX_BROKER", field: "OutboxBroker", docDefault: "`nats`; with `NATS_URL=off`, `kafka` when `KAFKA_BROKERS` is set, else `rabbitmq` when `EFFECTIVELY_SOURCES` lists it",
		load: func(c *Config, v string, _ bool) error {
			c.OutboxBroker = v
			if v == OutboxNATS && !c.NATS.Enabled() {
				// Asked for by name: no relay would run, and no event
				// would ever be published.
				return errors.New("nats: NATS_URL is off; use kafka or rabbitmq")
			}
			if v == "" {
				switch {
				case c.NATS.Enabled():
					c.OutboxBroker = OutboxNATS
				case c.Kafka.Enabled():
					c.OutboxBroker = OutboxKafka
				case c.HasSource(SourceRabbitMQ):
					c.OutboxBroker = OutboxRabbitMQ
				default:
					c.OutboxBroker = OutboxNATS
				}
			}
			return nil
		},
		check: func(c Config) error {
			switch {
			case c.OutboxBroker != OutboxNATS && c.OutboxBroker != OutboxKafka && c.OutboxBroker != OutboxRabbitMQ:
				return fmt.Errorf("%q: use nats, kafka or rabbitmq", c.OutboxBroker)
			case c.OutboxBroker == OutboxKafka && !c.Kafka.Enabled():
				return errors.New("kafka: KAFKA_BROKERS is off")
			}
			return nil
		},
		doc: "the broker the outbox relay publishes to: `nats` (JetStream), `kafka` or `rabbitmq` (`RABBITMQ_URL`, confirmed publishes)"},
}

func init() {
	variables = append(variables, kafkaVariables...)
	AvailableSources = append(AvailableSources, SourceKafka)
}

// ifKafka runs check only when the Kafka side is on.
func ifKafka(check func(Config) error) func(Config) error {
	return func(c Config) error {
		if !c.Kafka.Enabled() {
			return nil
		}
		return check(c)
	}
}

// validateKafka checks the consumer with kafka.Config.Validate when
// EFFECTIVELY_SOURCES has kafka.
func (c Config) validateKafka() []error {
	if !c.HasSource(SourceKafka) {
		return nil
	}
	if !c.Kafka.Enabled() {
		return []error{fmt.Errorf("%s=%s: the kafka source needs KAFKA_BROKERS", EnvSources, strings.Join(c.Sources, ","))}
	}
	if err := c.Kafka.Consumer.Validate(); err != nil {
		return []error{fmt.Errorf("KAFKA_BROKERS, KAFKA_TOPIC: %w", err)}
	}
	return nil
}
