package config

import (
	"reflect"
	"strings"
	"testing"
)

func init() {
	for k, v := range map[string]string{
		"KAFKA_BROKERS": "kafka:9092", "KAFKA_TOPIC": "t.messages", "KAFKA_GROUP": "g", "KAFKA_MAX_POLL_RECORDS": "100",
		"KAFKA_HANDLERS": "8", "KAFKA_EVENTS_PREFIX": "t.events", "OUTBOX_BROKER": "kafka",
	} {
		everyVariable[k] = v
	}
}

func loadKafka(t *testing.T, vars map[string]string) (Config, error) {
	t.Helper()
	all := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}
	for k, v := range vars {
		all[k] = v
	}
	c, err := Load(env(all))
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestKafkaDefaults(t *testing.T) {
	c, err := loadKafka(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kafka.Enabled() || c.OutboxBroker != OutboxNATS {
		t.Fatalf("by default Kafka is off and the relay publishes to NATS: %+v, outbox %s", c.Kafka, c.OutboxBroker)
	}
	c, err = loadKafka(t, map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092, 127.0.0.1:9093", "NATS_URL": "off"})
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kafka
	if !reflect.DeepEqual(k.Brokers, []string{"127.0.0.1:9092", "127.0.0.1:9093"}) || !reflect.DeepEqual(k.Consumer.Brokers, k.Brokers) ||
		k.Consumer.Topic != "effectively.messages" || k.Consumer.Group != "effectively-worker" || k.Consumer.MaxPollRecords != 500 ||
		k.Consumer.Handlers != 64 || k.EventsPrefix != "effectively.events" {
		t.Fatalf("Kafka defaults not applied: %+v", k)
	}
	if c.OutboxBroker != OutboxKafka {
		t.Fatalf("with NATS off and Kafka on the relay publishes to %s, want kafka", c.OutboxBroker)
	}
	c, err = loadKafka(t, map[string]string{"NATS_URL": "off", EnvSources: "rabbitmq"})
	if err != nil {
		t.Fatal(err)
	}
	if c.OutboxBroker != OutboxRabbitMQ {
		t.Fatalf("with NATS off and only the rabbitmq source the relay publishes to %s, want rabbitmq", c.OutboxBroker)
	}
}

func TestKafkaRefusals(t *testing.T) {
	for name, tt := range map[string]struct {
		vars map[string]string
		want string
	}{
		"outbox to kafka without brokers": {map[string]string{"OUTBOX_BROKER": "kafka"}, "OUTBOX_BROKER=kafka: KAFKA_BROKERS is off"},
		"unknown outbox broker":           {map[string]string{"OUTBOX_BROKER": "amqp"}, `OUTBOX_BROKER="amqp": use nats, kafka or rabbitmq`},
		"broker without port":             {map[string]string{"EFFECTIVELY_SOURCES": "kafka", "KAFKA_BROKERS": "kafka"}, `"kafka" is not host:port`},
		"bad topic":                       {map[string]string{"EFFECTIVELY_SOURCES": "kafka", "KAFKA_BROKERS": "k:9092", "KAFKA_TOPIC": "a/b"}, "only letters"},
		"zero batch":                      {map[string]string{"KAFKA_BROKERS": "k:9092", "KAFKA_MAX_POLL_RECORDS": "0"}, "KAFKA_MAX_POLL_RECORDS"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadKafka(t, tt.vars)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}
