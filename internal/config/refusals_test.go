package config

import (
	"strings"
	"testing"
)

// TestRabbitMQURLRefusedWithoutItsPassword: a RABBITMQ_URL Validate refuses
// comes back without its password (the worker logs the refusal), and an
// upper-case scheme, which amqp091-go takes, is accepted.
func TestRabbitMQURLRefusedWithoutItsPassword(t *testing.T) {
	for _, u := range []string{
		"amqp:/effectively:s3cretPW@mq.example:5672/", // a typo
		"http://effectively:s3cretPW@mq.example:5672/",
	} {
		_, err := validate(t, base(map[string]string{EnvSources: "rabbitmq", "NATS_URL": "off", "RABBITMQ_URL": u}))
		if err == nil {
			t.Errorf("%s: accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cretPW") || !strings.Contains(err.Error(), "RABBITMQ_URL") {
			t.Errorf("the refusal of RABBITMQ_URL carries its password, or does not name it:\n%v", err)
		}
	}
	if _, err := validate(t, base(map[string]string{EnvSources: "rabbitmq", "NATS_URL": "off", "RABBITMQ_URL": "AMQPS://u:p@mq.example:5671/"})); err != nil {
		t.Errorf("an upper-case scheme refused: %v", err)
	}
}

// TestListenersOnOneAddressRefused: two of the worker's listeners on one
// port of one host (or a wildcard) cannot both bind: Validate refuses it
// (exit 2), naming both, instead of the worker stopping with exit 1 after
// it started consuming.
func TestListenersOnOneAddressRefused(t *testing.T) {
	for name, vals := range map[string]map[string]string{
		"api=health":      {"EFFECTIVELY_API_ADDR": "127.0.0.1:8081", "EFFECTIVELY_API_TOKENS_FILE": "/t"},
		"webhook=health":  {"EFFECTIVELY_WEBHOOK_ADDR": "127.0.0.1:8081", "STRIPE_WEBHOOK_SECRETS": "whsec_a"},
		"pprof=health":    {"EFFECTIVELY_PPROF_ADDR": "127.0.0.1:8081"},
		"wildcard=health": {"EFFECTIVELY_WEBHOOK_ADDR": ":8081", "STRIPE_WEBHOOK_SECRETS": "whsec_a", EnvAllowPublicListeners: "true"},
	} {
		_, err := validate(t, base(vals))
		if err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_HEALTH_ADDR") {
			t.Errorf("%s: %v: err %v; want a refusal naming both listeners", name, vals, err)
		}
	}
	if _, err := validate(t, base(map[string]string{"EFFECTIVELY_PPROF_ADDR": "127.0.0.1:6060"})); err != nil {
		t.Errorf("listeners on ports of their own refused: %v", err)
	}
}

// TestOutboxNATSWithoutNATSRefused: OUTBOX_BROKER=nats with NATS_URL=off
// would run no relay: no event would ever be published.
func TestOutboxNATSWithoutNATSRefused(t *testing.T) {
	c, err := validate(t, base(map[string]string{"NATS_URL": "off", EnvSources: "rabbitmq", "OUTBOX_BROKER": "nats"}))
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_BROKER") {
		t.Errorf("OUTBOX_BROKER=%s with NATS_URL=off: err %v, want a refusal naming it", c.OutboxBroker, err)
	}
}
