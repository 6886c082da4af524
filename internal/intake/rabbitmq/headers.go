package rabbitmq

import (
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
)

// headerCarrier adapts AMQP headers to the trace propagator: traceparent
// and tracestate travel as string headers. Get matches the key in any case.
type headerCarrier amqp.Table

var _ propagation.TextMapCarrier = headerCarrier(nil)

func (h headerCarrier) Get(key string) string {
	if v, ok := h[key].(string); ok {
		return v
	}
	for k, v := range h {
		if s, ok := v.(string); ok && strings.EqualFold(k, key) {
			return s
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
