package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/testenv"
)

func TestPublish(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	t.Setenv("NATS_URL", testenv.NATSURL())
	t.Setenv("NATS_STREAM", j.Stream)
	t.Setenv("NATS_SUBJECT", j.Subject)
	valid := `{"id": "evt_pub1", "type": "order.placed", "data": {"order_id": 1, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	changed := strings.Replace(valid, "1999", "2000", 1)
	file := filepath.Join(t.TempDir(), "orders.jsonl")
	if err := os.WriteFile(file, []byte(valid+"\n"+valid+"\n"+changed+"\n{\"id\": 7}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"publish", file}, nil, &stdout, &stderr)
	if code != exitInvalid {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitInvalid, stderr.String())
	}
	var results []publishResult
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var r publishResult
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	want := []string{pubStored, pubDuplicate, pubStored, pubStored}
	if len(results) != len(want) {
		t.Fatalf("results = %+v", results)
	}
	for i, r := range results {
		if r.Status != want[i] || r.Line != i+1 || r.Stream != j.Stream || !strings.HasPrefix(r.Subject, strings.TrimSuffix(j.Subject, ">")) {
			t.Errorf("line %d = %+v, want status %s", i+1, r, want[i])
		}
	}
	if results[3].Invalid == "" || results[3].MsgID != "" {
		t.Errorf("invalid message = %+v: want an error and no Nats-Msg-Id", results[3])
	}
	if results[0].MsgID == results[2].MsgID || !strings.HasPrefix(results[2].MsgID, "evt_pub1#") {
		t.Errorf("a changed payload must get its own Nats-Msg-Id: %q vs %q", results[0].MsgID, results[2].MsgID)
	}
	if !strings.Contains(stderr.String(), "3 stored, 1 duplicate") {
		t.Errorf("summary: %s", stderr.String())
	}
	st, err := j.JS.Stream(context.Background(), j.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != 3 {
		t.Errorf("stream holds %d messages (%v), want 3", info.State.Msgs, err)
	}
}

func TestPublishNeedsABroker(t *testing.T) {
	t.Setenv("NATS_URL", "off")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"publish", "-"}, strings.NewReader(""), &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit code %d, want %d: %s", code, exitUsage, stderr.String())
	}
}

// TestPublishSetsTraceparent: with tracing on, each published message
// carries the traceparent of its publish span, which the worker continues.
func TestPublishSetsTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { tracing.Install(noop.NewTracerProvider()) })
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	t.Setenv("NATS_URL", testenv.NATSURL())
	t.Setenv("NATS_STREAM", j.Stream)
	t.Setenv("NATS_SUBJECT", j.Subject)
	raw := `{"id": "evt_pubtrace", "type": "order.placed", "data": {"order_id": 1, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"publish", "-"}, strings.NewReader(raw+"\n"), &stdout, &stderr); code != exitOK {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	st, err := j.JS.Stream(context.Background(), j.Stream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.Propagator.Extract(context.Background(), tracing.HeaderCarrier(msg.Header))
	got := trace.SpanContextFromContext(ctx)
	var span *tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		if sp.Name == "publish order.placed" {
			span = &sp
		}
	}
	if span == nil {
		t.Fatalf("no publish span; spans %v", exp.GetSpans())
	}
	if !got.IsValid() || got.TraceID() != span.SpanContext.TraceID() || got.SpanID() != span.SpanContext.SpanID() {
		t.Errorf("message header traceparent %v, want the publish span %v (headers %v)", got, span.SpanContext, msg.Header)
	}
}
