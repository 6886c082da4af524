package kafka

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier carries trace context (traceparent, tracestate, baggage)
// in a record's headers, for the propagator of internal/leaf/tracing. Keys
// match in any case, as HTTP and NATS headers do.
type HeaderCarrier struct {
	Headers *[]kgo.RecordHeader
}

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the value of the first header named key.
func (h HeaderCarrier) Get(key string) string {
	for _, hd := range *h.Headers {
		if strings.EqualFold(hd.Key, key) {
			return string(hd.Value)
		}
	}
	return ""
}

// Set replaces the headers named key with one of value.
func (h HeaderCarrier) Set(key, value string) {
	out := (*h.Headers)[:0]
	for _, hd := range *h.Headers {
		if !strings.EqualFold(hd.Key, key) {
			out = append(out, hd)
		}
	}
	*h.Headers = append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys lists the header names.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(*h.Headers))
	for _, hd := range *h.Headers {
		keys = append(keys, hd.Key)
	}
	return keys
}
