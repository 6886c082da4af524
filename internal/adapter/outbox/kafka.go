package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// DefaultKafkaTopicPrefix is prepended to an event's topic to name its
// Kafka topic: order.paid is produced to effectively.events.order.paid.
const DefaultKafkaTopicPrefix = "effectively.events"

// EventIDHeader is the record header that carries the event ID, as the
// record key does.
const EventIDHeader = "event_id"

// KafkaConfig configures a KafkaPublisher. Zero values take the defaults
// noted per field.
type KafkaConfig struct {
	// TopicPrefix is prepended to each event's topic. Default
	// DefaultKafkaTopicPrefix.
	TopicPrefix string
	// PublishTimeout bounds the wait for a batch's produce results.
	// Default 10s.
	PublishTimeout time.Duration
}

// KafkaPublisher produces outbox events to Kafka. Kafka does not dedupe a
// re-publish (the idempotent producer dedupes only its own retries within
// one session), so a relay that crashes between the produce and the mark
// writes a second record: each record carries the event ID in its key and
// in the event_id header for consumers to recognise it.
type KafkaPublisher struct {
	cl    *kgo.Client
	cfg   KafkaConfig
	stats struct{ published, failed atomic.Int64 }
}

// NewKafkaPublisher returns a publisher producing through cl (the caller's,
// closed by it).
func NewKafkaPublisher(cl *kgo.Client, cfg KafkaConfig) (*KafkaPublisher, error) {
	if cl == nil {
		return nil, errors.New("kafka publisher: client is required")
	}
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix = DefaultKafkaTopicPrefix
	}
	cfg.TopicPrefix = strings.TrimSuffix(cfg.TopicPrefix, ".")
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 10 * time.Second
	}
	return &KafkaPublisher{cl: cl, cfg: cfg}, nil
}

// Topic is the Kafka topic an event of topic is produced to.
func (p *KafkaPublisher) Topic(topic string) string { return p.cfg.TopicPrefix + "." + topic }

// Stats returns the publisher's counters (Duplicates stays 0: Kafka
// recognises no repeat).
func (p *KafkaPublisher) Stats() Stats {
	return Stats{Published: p.stats.published.Load(), Failed: p.stats.failed.Load()}
}

// PublishBatch produces batch and waits for every produce result; it
// returns the IDs of the events the broker stored, in batch order, and the
// first failure. It is a store.PublishFunc: only the returned IDs are
// marked published, the rest are claimed again by a later pass.
//
// Each record is keyed by the event ID (so one event's copies land in one
// partition) and carries it in the event_id header, with a traceparent of
// its own "outbox publish" span in the headers.
func (p *KafkaPublisher) PublishBatch(ctx context.Context, batch []store.OutboxEvent) ([]string, error) {
	pctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, e := range batch {
		sctx, span := tracing.Tracer().Start(pctx, "outbox publish", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.destination.name", p.Topic(e.Topic)),
				attribute.String("effectively.event_id", e.EventID)))
		r := &kgo.Record{
			Topic:   p.Topic(e.Topic),
			Key:     []byte(e.EventID),
			Value:   e.Payload,
			Headers: []kgo.RecordHeader{{Key: EventIDHeader, Value: []byte(e.EventID)}, {Key: "content-type", Value: []byte("application/json")}},
		}
		tracing.Propagator.Inject(sctx, tracing.RecordHeaders{Headers: &r.Headers})
		wg.Add(1)
		p.cl.Produce(pctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				span.SetStatus(codes.Error, "not stored")
				errs[i] = fmt.Errorf("produce event %s to %s: %w", e.EventID, r.Topic, err)
			}
			span.End()
		})
	}
	wg.Wait()
	done := make([]string, 0, len(batch))
	var first error
	for i, e := range batch {
		if errs[i] != nil {
			p.stats.failed.Add(1)
			first = cmpOr(first, errs[i])
			continue
		}
		p.stats.published.Add(1)
		done = append(done, e.EventID)
	}
	failpoint.Hit(failpoint.OutboxAfterPublish)
	return done, first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
