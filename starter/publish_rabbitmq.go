package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// rabbitPublisher publishes to RABBITMQ_EXCHANGE with the message type as
// routing key and the message ID as message_id, with publisher confirms: a
// message the broker returns (no queue bound) or does not confirm is an
// error. RabbitMQ drops no copy: the worker's inbox recognises it.
type rabbitPublisher struct {
	pub      *rabbitmq.Publisher
	exchange string
}

func newRabbitMQPublisher(cfg config.Config) (*rabbitPublisher, error) {
	if cfg.RabbitMQ.Source.URL == "" {
		return nil, fmt.Errorf("%w: --broker rabbitmq needs RABBITMQ_URL", errUsage)
	}
	exchange := cfg.RabbitMQ.Source.Exchange
	if exchange == "" {
		exchange = rabbitmq.DefaultExchange
	}
	// The worker declares the exchange and its queue; publishing before
	// the worker ever ran fails every message, never loses one silently.
	return &rabbitPublisher{pub: rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: cfg.RabbitMQ.Source.URL, Name: "effectively starter"}), exchange: exchange}, nil
}

func (p *rabbitPublisher) Where() string { return "rabbitmq exchange " + p.exchange }

func (p *rabbitPublisher) Close() { _ = p.pub.Close() }

func (p *rabbitPublisher) Publish(ctx context.Context, raw []byte, _ *message.Message, typ string, res *publishResult) error {
	res.Exchange, res.Subject = p.exchange, typ
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("messaging.system", "rabbitmq"), attribute.String("messaging.destination.name", p.exchange))
	if _, err := p.pub.Publish(ctx, []rabbitmq.Outgoing{{Exchange: p.exchange, RoutingKey: typ, MessageID: res.MessageID, Body: raw}}); err != nil {
		return fmt.Errorf("publish to exchange %s (RABBITMQ_EXCHANGE; the worker declares it and its queue at its first start): %w", p.exchange, err)
	}
	res.Status = pubStored
	return nil
}
