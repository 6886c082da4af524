package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake/kafka"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/tools/kafkatest"
)

func TestHorizonFromTheTopicsConfiguration(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 0)
	cases := []struct {
		topic   string
		configs map[string]string
		want    time.Duration
		refused string // part of the error; "" when accepted
	}{
		{"bounded", map[string]string{"retention.ms": "86400000", "segment.ms": "3600000"}, 25 * time.Hour, ""},
		{"defaults", nil, 14 * 24 * time.Hour, ""}, // 7 d + 7 d, the broker's defaults
		{"forever", map[string]string{"retention.ms": "-1"}, 0, "retention.ms=-1"},
		{"compacted", map[string]string{"cleanup.policy": "compact"}, 0, "cleanup.policy=compact"},
		{"compact-delete", map[string]string{"cleanup.policy": "compact,delete"}, 0, "cleanup.policy=compact,delete"},
		// Past what a time.Duration holds (292 years): as good as forever,
		// never wrapped around to a short horizon.
		{"centuries", map[string]string{"retention.ms": "18446744073710"}, 0, "retention.ms=18446744073710"},
		{"overflowing-sum", map[string]string{"retention.ms": "9223372036854", "segment.ms": "604800000"}, 0, "retention.ms=9223372036854"},
	}
	for _, c := range cases {
		t.Run(c.topic, func(t *testing.T) {
			kafkatest.CreateTopic(t, addr, c.topic, 1, c.configs)
			cfg := e.config(t)
			cfg.Topic = c.topic
			cons, err := kafka.NewConsumer(e.in, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Client().Close()
			h, err := cons.Horizon(context.Background())
			if c.refused == "" {
				if err != nil || h.Redelivery != c.want || h.DuplicateWindow != 0 || h.Source != kafka.DefaultName || !strings.Contains(h.Basis, c.topic) {
					t.Fatalf("horizon %+v, %v; want %s for source %s, basis naming the topic", h, err, c.want, kafka.DefaultName)
				}
				return
			}
			if !errors.Is(err, retention.ErrNoHorizon) || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), c.topic) {
				t.Fatalf("error %v; want ErrNoHorizon naming topic %s and %s", err, c.topic, c.refused)
			}
		})
	}
}

func TestHorizonOfAMissingTopic(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 0)
	cfg := e.config(t)
	cfg.Topic = "absent"
	cons, err := kafka.NewConsumer(e.in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Client().Close()
	if _, err := cons.Horizon(context.Background()); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("horizon of a missing topic: %v, want an error naming it", err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  kafka.Config
		want string
	}{
		{kafka.Config{}, "at least one seed broker"},
		{kafka.Config{Brokers: []string{"localhost"}}, `"localhost" is not host:port`},
		{kafka.Config{Brokers: []string{"b:9092"}, Topic: "a b"}, "only letters"},
	}
	for _, c := range cases {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error with %q", c.cfg, err, c.want)
		}
	}
	if err := (kafka.Config{Brokers: []string{"127.0.0.1:9092"}}).Validate(); err != nil {
		t.Errorf("a valid configuration: %v", err)
	}
}
