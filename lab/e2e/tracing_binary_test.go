package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// otlpCollector is a fake OTLP/HTTP collector: it keeps the span names it
// receives, per trace ID.
type otlpCollector struct {
	mu     sync.Mutex
	traces map[string][]string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				id := hex.EncodeToString(sp.GetTraceId())
				c.traces[id] = append(c.traces[id], sp.GetName())
			}
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

func (c *otlpCollector) spans(traceID string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.traces[traceID])
}

// TestWorkerBinaryExportsTraces runs the worker binary with the standard
// OTEL_* variables pointing at a fake OTLP collector and publishes a
// message whose NATS headers carry a traceparent: the collector receives
// the message's intake, workflow, activity and provider spans in the
// publisher's trace.
func TestWorkerBinaryExportsTraces(t *testing.T) {
	col := &otlpCollector{traces: map[string][]string{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = testenv.NATSURL()
	s.cfg.Extra = append(s.cfg.Extra, brokerEnv(j)...)
	p := s.start(t,
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=200",
	)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	subject, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = order("evt_bin_trace", 9301, "pm_card_visa")
	msg.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := j.JS.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if st := s.waitOutcome(t, "evt_bin_trace"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	want := []string{
		"intake receive", "StartWorkflow:" + workflows.OrderPlacedName, "RunWorkflow:" + workflows.OrderPlacedName,
		"RunActivity:ChargeOrder", "RunActivity:SendReceipt", "stripe POST", "sendgrid POST", "postgres ",
	}
	have := func() []string {
		var missing []string
		got := col.spans(traceID)
		for _, w := range want {
			if !hasName(got, w) {
				missing = append(missing, w)
			}
		}
		return missing
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(have()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if missing := have(); len(missing) > 0 {
		t.Errorf("the collector has no %v in trace %s; it has %v\nworker logs:\n%s", missing, traceID, col.spans(traceID), p.Logs())
	}
}

func hasName(names []string, prefix string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return len(n) >= len(prefix) && n[:len(prefix)] == prefix })
}
