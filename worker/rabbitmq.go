package main

import (
	"log/slog"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// rabbitMQRelay is the outbox relay of a worker without NATS: events go to
// RABBITMQ_EVENTS_EXCHANGE with publisher confirms, a returned one staying
// unpublished. The publisher connects on its first event.
func rabbitMQRelay(cfg config.Config, in *intake.Intake, logger *slog.Logger, onClose func(func())) (*outbox.Relay, error) {
	pub := rabbitmq.NewEventPublisher(cfg.RabbitMQ.Source.URL, cfg.RabbitMQ.Events)
	onClose(func() { _ = pub.Close() })
	return outbox.New(in.Store(), pub, outbox.Config{Logger: logger})
}
