package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// kafkaPublisher produces to KAFKA_TOPIC, each record keyed by its message
// ID (so copies of one message share a partition) with a traceparent in
// its headers, and waits for the broker to store it. Kafka drops no copy:
// the worker's inbox recognises them.
type kafkaPublisher struct {
	cl    *kgo.Client
	topic string
}

func newKafkaPublisher(ctx context.Context, cfg config.Config) (*kafkaPublisher, error) {
	if !cfg.Kafka.Enabled() {
		return nil, fmt.Errorf("%w: --broker kafka needs KAFKA_BROKERS", errUsage)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ClientID("effectively-starter"),
		kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%w: kafka client (KAFKA_BROKERS): %w", errUsage, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka brokers %v (KAFKA_BROKERS): %w", cfg.Kafka.Brokers, err)
	}
	return &kafkaPublisher{cl: cl, topic: cfg.Kafka.Consumer.Topic}, nil
}

func (p *kafkaPublisher) Where() string { return "kafka topic " + p.topic }

func (p *kafkaPublisher) Close() { p.cl.Close() }

func (p *kafkaPublisher) Publish(ctx context.Context, raw []byte, m *message.Message, _ string, res *publishResult) error {
	rec := &kgo.Record{Topic: p.topic, Value: raw}
	if m != nil {
		rec.Key = []byte(m.ID)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", p.topic))
	tracing.Propagator.Inject(ctx, tracing.RecordHeaders{Headers: &rec.Headers})
	if err := p.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("produce to %s: %w", p.topic, err)
	}
	res.Topic, res.Partition, res.Offset, res.Status = rec.Topic, rec.Partition, rec.Offset, pubStored
	return nil
}
