package main

import (
	"fmt"
	"log/slog"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// addRabbitMQ adds the RabbitMQ source to b and, when b has no relay (NATS
// off), an outbox relay publishing to RabbitMQ. Nothing connects before
// Run, except the retention check's Horizon, which declares the queue.
func addRabbitMQ(cfg config.Config, in *intake.Intake, m *metrics.Metrics, logger *slog.Logger, b *broker) error {
	rcfg := cfg.RabbitMQ.Source
	rcfg.Logger, rcfg.Metrics = logger, m
	cons, err := rabbitmq.NewConsumer(in, rcfg)
	if err != nil {
		return fmt.Errorf("%w: RABBITMQ_*: %w", errBadConfig, err)
	}
	b.sources = append(b.sources, cons)
	if b.relay != nil {
		return nil // events go to JetStream
	}
	pub := rabbitmq.NewEventPublisher(rcfg.URL, cfg.RabbitMQ.Events)
	b.closers = append(b.closers, func() { _ = pub.Close() })
	if b.relay, err = outbox.New(in.Store(), pub, outbox.Config{Logger: logger}); err != nil {
		return err
	}
	return nil
}
