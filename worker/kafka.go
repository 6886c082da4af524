package main

import (
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
)

// kafkaRelay is the outbox relay producing to Kafka (OUTBOX_BROKER=kafka).
// Its client connects lazily; onClose closes it with the worker's deps.
func kafkaRelay(cfg config.Config, in *intake.Intake, logger *slog.Logger, onClose func(func())) (*outbox.Relay, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ClientID("effectively-worker-outbox"))
	if err != nil {
		return nil, fmt.Errorf("kafka producer (KAFKA_BROKERS): %w", err)
	}
	onClose(cl.Close)
	pub, err := outbox.NewKafkaPublisher(cl, outbox.KafkaConfig{TopicPrefix: cfg.Kafka.EventsPrefix})
	if err != nil {
		return nil, err
	}
	return outbox.New(in.Store(), pub, outbox.Config{Logger: logger})
}
