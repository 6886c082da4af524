package main

import (
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/kafka"
)

// connectKafka adds the Kafka source to b and, with OUTBOX_BROKER=kafka,
// makes the relay produce to Kafka. The clients connect lazily: a broker
// that is down shows in the source's readiness check and in the horizon
// check, which refuses the start.
func connectKafka(cfg config.Config, in *intake.Intake, m *metrics.Metrics, logger *slog.Logger, b *broker) error {
	kcfg := cfg.Kafka.Consumer
	kcfg.Logger, kcfg.Metrics = logger, m
	cons, err := kafka.NewConsumer(in, kcfg)
	if err != nil {
		return err
	}
	b.sources = append(b.sources, cons)
	if cfg.OutboxBroker != config.OutboxKafka {
		return nil
	}
	if b.kafka, err = kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ClientID("effectively-worker-outbox")); err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	pub, err := outbox.NewKafkaPublisher(b.kafka, outbox.KafkaConfig{TopicPrefix: cfg.Kafka.EventsPrefix})
	if err != nil {
		return err
	}
	b.relay, err = outbox.New(in.Store(), pub, outbox.Config{Logger: logger})
	return err
}
