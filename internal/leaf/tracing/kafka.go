package tracing

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
)

// RecordHeaders adapts a Kafka record's headers to the propagator, so
// traceparent travels with the record. Get matches the key in any case.
type RecordHeaders struct {
	Headers *[]kgo.RecordHeader
}

var _ propagation.TextMapCarrier = RecordHeaders{}

// Get returns the value of the first header named key.
func (h RecordHeaders) Get(key string) string {
	for _, hd := range *h.Headers {
		if strings.EqualFold(hd.Key, key) {
			return string(hd.Value)
		}
	}
	return ""
}

// Set replaces the headers named key with one of value.
func (h RecordHeaders) Set(key, value string) {
	out := (*h.Headers)[:0]
	for _, hd := range *h.Headers {
		if !strings.EqualFold(hd.Key, key) {
			out = append(out, hd)
		}
	}
	*h.Headers = append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// Keys lists the header names.
func (h RecordHeaders) Keys() []string {
	keys := make([]string, 0, len(*h.Headers))
	for _, hd := range *h.Headers {
		keys = append(keys, hd.Key)
	}
	return keys
}
