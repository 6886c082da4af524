package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Brokers `starter publish --broker` names.
const (
	brokerNATS  = "nats"
	brokerKafka = "kafka"
)

// brokerFlag takes --broker (or -broker) NAME off args. Without it the
// broker is NATS, or Kafka when NATS_URL is off and KAFKA_BROKERS is set.
func brokerFlag(cfg config.Config, args []string) (string, []string, error) {
	broker := brokerNATS
	if !cfg.NATS.Enabled() && cfg.Kafka.Enabled() {
		broker = brokerKafka
	}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" || name != "broker" {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return "", nil, fmt.Errorf("%w: --broker needs a value: nats or kafka", errUsage)
			}
			i++
			value = args[i]
		}
		broker = value
	}
	if broker != brokerNATS && broker != brokerKafka {
		return "", nil, fmt.Errorf("%w: --broker %q: use nats or kafka", errUsage, broker)
	}
	return broker, rest, nil
}

// kafkaResult is the JSON line printed per message published to Kafka.
type kafkaResult struct {
	Line      int    `json:"line"`
	MessageID string `json:"message_id,omitempty"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Status is published (stored by the broker; Kafka drops no copy, the
	// worker's inbox recognises it) or skipped (too large to publish).
	Status  string `json:"status"`
	Invalid string `json:"invalid,omitempty"`
}

// publishKafka produces each message of name to KAFKA_TOPIC, keyed by its
// ID (so copies of one message share a partition), with a traceparent in
// the record headers, and waits for the broker to store each.
func publishKafka(ctx context.Context, cfg config.Config, name string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if !cfg.Kafka.Enabled() {
		return exitUsage, fmt.Errorf("%w: --broker kafka needs KAFKA_BROKERS", errUsage)
	}
	r, size, closeInput, err := openInput(name, stdin)
	if err != nil {
		return exitError, err
	}
	defer closeInput()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ClientID("effectively-starter"),
		kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		return exitUsage, fmt.Errorf("kafka client (KAFKA_BROKERS): %w", err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.Ping(pctx)
	cancel()
	if err != nil {
		return exitError, fmt.Errorf("kafka brokers %v (KAFKA_BROKERS): %w", cfg.Kafka.Brokers, err)
	}
	shutdownTracing, _, err := tracing.Setup(ctx, config.OTelLookup, "effectively-starter")
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()

	topic := cfg.Kafka.Consumer.Topic
	bar, r := progress(r, size, stderr, "publishing")
	counts := map[string]int{}
	invalid := 0
	enc := json.NewEncoder(stdout)
	err = route.Default().DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		res := kafkaResult{Line: line, Topic: topic}
		rec := &kgo.Record{Topic: topic, Value: raw}
		typ := "invalid"
		if derr != nil {
			res.Invalid = derr.Error()
			invalid++
			if raw == nil {
				res.Status = "skipped"
				counts[res.Status]++
				return enc.Encode(res)
			}
		} else {
			res.MessageID, typ = m.ID, m.Type
			rec.Key = []byte(m.ID)
		}
		sctx, span := tracing.Tracer().Start(ctx, "publish "+typ, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", topic),
				attribute.String("effectively.message_id", res.MessageID)))
		tracing.Propagator.Inject(sctx, tracing.RecordHeaders{Headers: &rec.Headers})
		err := cl.ProduceSync(sctx, rec).FirstErr()
		span.End()
		if err != nil {
			return fmt.Errorf("message at line %d: produce to %s: %w", line, topic, err)
		}
		res.Partition, res.Offset, res.Status = rec.Partition, rec.Offset, pubStored
		counts[res.Status]++
		return enc.Encode(res)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(stderr, "published %d messages to kafka topic %s: %d stored (Kafka drops no copy: the worker's inbox recognises them), %d invalid (the worker quarantines them), %d skipped (too large)\n",
		counts[pubStored]+counts["skipped"], topic, counts[pubStored], invalid, counts["skipped"])
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return exitError, fmt.Errorf("interrupted: %w", err)
		}
		return exitError, err
	}
	if invalid > 0 {
		return exitInvalid, nil
	}
	return exitOK, nil
}
