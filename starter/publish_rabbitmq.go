package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// rabbitResult is the JSON line printed per message published to RabbitMQ.
type rabbitResult struct {
	Line      int    `json:"line"`
	MessageID string `json:"message_id,omitempty"`
	Exchange  string `json:"exchange"`
	// RoutingKey is the message type ("invalid" for one that does not decode).
	RoutingKey string `json:"routing_key"`
	// Status is published: confirmed by the broker and routed to a queue.
	// RabbitMQ drops no copy: every one reaches the worker, whose inbox
	// recognises it.
	Status  string `json:"status"`
	Invalid string `json:"invalid,omitempty"`
}

// cmdPublishRabbitMQ publishes each message of name to RABBITMQ_EXCHANGE
// with its type as routing key, with publisher confirms; a message the
// broker returns (no queue bound) stops the run as an error.
func cmdPublishRabbitMQ(ctx context.Context, cfg config.Config, name string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	rc := cfg.RabbitMQ.Source
	if !cfg.RabbitMQ.Enabled() {
		return exitUsage, fmt.Errorf("%w: publish --broker rabbitmq needs RABBITMQ_URL", errUsage)
	}
	r, size, closeInput, err := openInput(name, stdin)
	if err != nil {
		return exitError, err
	}
	defer closeInput()
	shutdownTracing, _, err := tracing.Setup(ctx, config.OTelLookup, "effectively-starter")
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	exchange := rc.Exchange
	if exchange == "" {
		exchange = rabbitmq.DefaultExchange
	}
	// The worker declares the exchange and its queue; publishing before the
	// worker ever ran returns every message (no queue bound), which is an
	// error here, never a silent loss.
	pub := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: rc.URL, Name: "effectively starter"})
	defer pub.Close() //nolint:errcheck // the publishes were confirmed or reported

	bar, r := progress(r, size, stderr, "publishing")
	published, invalid, skipped := 0, 0, 0
	enc := json.NewEncoder(stdout)
	err = route.Default().DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		res := rabbitResult{Line: line, Exchange: exchange, RoutingKey: "invalid"}
		if derr != nil {
			res.Invalid = derr.Error()
			invalid++
			if raw == nil {
				res.Status = "skipped"
				skipped++
				return enc.Encode(res)
			}
		} else {
			res.MessageID, res.RoutingKey = m.ID, m.Type
		}
		sctx, span := tracing.Tracer().Start(ctx, "publish "+res.RoutingKey, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "rabbitmq"), attribute.String("messaging.destination.name", exchange),
				attribute.String("effectively.message_id", res.MessageID)))
		_, err := pub.Publish(sctx, []rabbitmq.Outgoing{{Exchange: exchange, RoutingKey: res.RoutingKey, MessageID: res.MessageID, Body: raw}})
		span.End()
		if err != nil {
			return fmt.Errorf("message at line %d: publish to exchange %s (RABBITMQ_EXCHANGE; the worker declares it and its queue at its first start): %w", line, exchange, err)
		}
		res.Status = pubStored
		published++
		return enc.Encode(res)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(stderr, "published %d messages to rabbitmq exchange %s: %d invalid (the worker quarantines them), %d skipped (too large); RabbitMQ drops no copy, the worker's inbox recognises them\n",
		published, exchange, invalid, skipped)
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
