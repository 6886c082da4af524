package outbox

import (
	"context"
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// DefaultKafkaTopicPrefix is prepended to an event's topic to name its
// Kafka topic: order.paid is produced to effectively.events.order.paid.
const DefaultKafkaTopicPrefix = "effectively.events"

// EventIDHeader is the record header that carries the event ID, as the
// record key does.
const EventIDHeader = "event_id"

// KafkaConfig configures a KafkaPublisher.
type KafkaConfig struct {
	// TopicPrefix is prepended to each event's topic. Default
	// DefaultKafkaTopicPrefix.
	TopicPrefix string
}

// KafkaPublisher produces outbox events to Kafka. Kafka does not dedupe a
// re-publish (the idempotent producer dedupes only its own retries within
// one session), so a relay that crashes between the produce and the mark
// writes a second record: each record carries the event ID in its key (so
// one event's copies share a partition) and in the event_id header, for
// consumers to recognise it.
type KafkaPublisher struct {
	cl  *kgo.Client
	cfg KafkaConfig
}

var _ Publisher = (*KafkaPublisher)(nil)

// NewKafkaPublisher returns a Publisher producing through cl (the
// caller's, closed by it).
func NewKafkaPublisher(cl *kgo.Client, cfg KafkaConfig) (*KafkaPublisher, error) {
	if cl == nil {
		return nil, errors.New("kafka publisher: client is required")
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = DefaultKafkaTopicPrefix
	}
	cfg.TopicPrefix = strings.TrimSuffix(cfg.TopicPrefix, ".")
	return &KafkaPublisher{cl: cl, cfg: cfg}, nil
}

// Name is "kafka".
func (p *KafkaPublisher) Name() string { return "kafka" }

// Topic is the Kafka topic an event of topic is produced to.
func (p *KafkaPublisher) Topic(topic string) string { return p.cfg.TopicPrefix + "." + topic }

// Publish produces e and waits for the broker's produce result (all
// in-sync replicas, kgo's default acks). Duplicate is always false: Kafka
// recognises no repeat. The record carries a traceparent of its own
// "outbox publish" span when tracing is on.
func (p *KafkaPublisher) Publish(ctx context.Context, e store.OutboxEvent) (bool, error) {
	ctx, span := tracing.Tracer().Start(ctx, "outbox publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", p.Topic(e.Topic)),
			attribute.String("effectively.event_id", e.EventID)))
	defer span.End()
	r := &kgo.Record{
		Topic: p.Topic(e.Topic),
		Key:   []byte(e.EventID),
		Value: e.Payload,
		Headers: []kgo.RecordHeader{
			{Key: EventIDHeader, Value: []byte(e.EventID)},
			{Key: "content-type", Value: []byte("application/json")},
		},
	}
	tracing.Propagator.Inject(ctx, tracing.RecordHeaders{Headers: &r.Headers})
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		span.SetStatus(codes.Error, "not stored")
		return false, err
	}
	return false, nil
}
