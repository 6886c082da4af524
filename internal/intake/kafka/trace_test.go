package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/kafkatest"
)

// A record whose headers carry a traceparent is received in that trace.
func TestTraceparentFromRecordHeaders(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { tracing.Install(noop.NewTracerProvider()) })

	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 1)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	e.produce(t, &kgo.Record{Value: orderMsg("evt_traced", 1), Headers: []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")},
	}})
	e.run(t, e.config(t))
	var found bool
	waitFor(20*time.Second, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "intake receive" {
				found = s.SpanContext.TraceID().String() == traceID && s.Parent.SpanID().String() == "00f067aa0ba902b7"
				return true
			}
		}
		return false
	})
	if !found {
		t.Fatalf("no intake receive span in trace %s under the producer's span; spans: %v", traceID, exp.GetSpans())
	}
}
