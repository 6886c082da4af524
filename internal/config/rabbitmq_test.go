package config

import (
	"strings"
	"testing"
	"time"
)

// TestRabbitMQVariables: not run by default; listed in EFFECTIVELY_SOURCES,
// the source takes the values;
// a queue without a TTL is refused naming the variable and the reason.
func TestRabbitMQVariables(t *testing.T) {
	load := func(env map[string]string) (Config, error) {
		env["STRIPE_API_KEY"], env["SENDGRID_API_KEY"] = "sk_test_x", "SG.x"
		c, err := Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err == nil {
			err = c.Validate()
		}
		return c, err
	}
	c, err := load(map[string]string{})
	if err != nil || c.HasSource(SourceRabbitMQ) {
		t.Fatalf("default: sources %v, %v; want jetstream only", c.Sources, err)
	}
	c, err = load(map[string]string{EnvSources: "jetstream,rabbitmq", "RABBITMQ_URL": "amqp://u:p@h:5672/", "RABBITMQ_MESSAGE_TTL": "2d", "RABBITMQ_QUEUE": "q1"})
	if err != nil || !c.HasSource(SourceRabbitMQ) || c.RabbitMQ.Source.MessageTTL != 48*time.Hour || c.RabbitMQ.Source.Queue != "q1" ||
		c.RabbitMQ.Events.Exchange != DefaultRabbitMQEventsExchange {
		t.Fatalf("set: %+v, %v", c.RabbitMQ, err)
	}
	_, err = load(map[string]string{EnvSources: "rabbitmq", "NATS_URL": "off", "RABBITMQ_MESSAGE_TTL": "none"})
	if err == nil || !strings.Contains(err.Error(), "RABBITMQ_MESSAGE_TTL") || !strings.Contains(err.Error(), "no message TTL") {
		t.Fatalf("no TTL: %v", err)
	}
	if _, err = load(map[string]string{EnvSources: "rabbitmq", "RABBITMQ_URL": "nats://h", "RABBITMQ_PREFETCH": "0"}); err == nil || !strings.Contains(err.Error(), "RABBITMQ_URL") {
		t.Fatalf("a nats URL: %v", err)
	}
	if _, err = load(map[string]string{EnvSources: "rabbitmq", "RABBITMQ_PREFETCH": "0"}); err == nil || !strings.Contains(err.Error(), "RABBITMQ_PREFETCH") {
		t.Fatalf("prefetch 0: %v", err)
	}
}
