package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/storetest"
)

func TestReadSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    tracing.Settings
		wantErr string
	}{
		{name: "nothing set: off", env: nil, want: tracing.Settings{}},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: tracing.Settings{}},
		{name: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: tracing.Settings{Enabled: true, Protocol: "http/protobuf"}},
		{name: "endpoint alone", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: tracing.Settings{Enabled: true, Protocol: "http/protobuf"}},
		{name: "traces endpoint alone", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: tracing.Settings{Enabled: true, Protocol: "http/protobuf"}},
		{name: "grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: tracing.Settings{Enabled: true, Protocol: "grpc"}},
		{name: "traces protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: tracing.Settings{Enabled: true, Protocol: "http/protobuf"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: tracing.Settings{}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tracing.ReadSettings(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReadSettings = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestSetupOffInstallsNothing(t *testing.T) {
	shutdown, on, err := tracing.Setup(context.Background(), func(string) (string, bool) { return "", false }, "x")
	if err != nil || on {
		t.Fatalf("Setup with no variables = %v, %v; want off", on, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// recorder installs an in-memory exporter as the global provider for the
// test.
func recorder(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Install(tp)
	t.Cleanup(func() { tracing.Install(noop.NewTracerProvider()) })
	return exp, tp.Tracer("test")
}

// TestPgxTracerRecordsSQLNotArguments runs queries through a pool opened
// by store.Open: inside a span each is a child span with its SQL text, and
// neither an argument nor an error's message reaches the span; outside a
// span nothing is recorded.
// tracedPool is a recorder and a pool whose connections trace (PgxTracer).
func tracedPool(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer, *pgxpool.Pool) {
	t.Helper()
	exp, tr := recorder(t)
	pool, err := store.Open(context.Background(), storetest.NewDatabase(t), store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return exp, tr, pool
}

func TestPgxTracerRecordsSQLNotArguments(t *testing.T) {
	exp, tr, pool := tracedPool(t)
	const secret = "ada.lovelace@example.com"

	var s string
	if err := pool.QueryRow(context.Background(), "SELECT $1::text", secret).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("a query outside any trace made %d spans, want 0", n)
	}

	ctx, parent := tr.Start(context.Background(), "message")
	if err := pool.QueryRow(ctx, "SELECT $1::text", secret).Scan(&s); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, "CREATE TABLE t (email text PRIMARY KEY); INSERT INTO t VALUES ('"+secret+"')")
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, "INSERT INTO t VALUES ($1)", secret)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate insert: %v", err)
	}
	parent.End()

	spans := exp.GetSpans()
	var queries []tracetest.SpanStub
	for _, sp := range spans {
		if strings.HasPrefix(sp.Name, "postgres ") {
			queries = append(queries, sp)
		}
	}
	if len(queries) != 3 {
		t.Fatalf("got %d postgres spans, want 3: %v", len(queries), spans)
	}
	for _, sp := range queries {
		if sp.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q is not a child of the message's span", sp.Name)
		}
	}
	if queries[0].Name != "postgres SELECT" || attr(queries[0], "db.query.text") != "SELECT $1::text" {
		t.Errorf("first span = %q with query %q", queries[0].Name, attr(queries[0], "db.query.text"))
	}
	if last := queries[2]; last.Status.Code != codes.Error || last.Status.Description != "SQLSTATE 23505" {
		t.Errorf("failed insert's status = %+v, want an error naming SQLSTATE 23505 only", last.Status)
	}
	for _, sp := range queries[:1] {
		for _, kv := range sp.Attributes {
			if strings.Contains(kv.Value.String(), secret) {
				t.Errorf("span %q records an argument: %s=%s", sp.Name, kv.Key, kv.Value.String())
			}
		}
	}
	if strings.Contains(queries[2].Status.Description, secret) {
		t.Errorf("the error status quotes the row: %q", queries[2].Status.Description)
	}
}

// TestPgxTracerSpansABatch: a batch (the inbox's group commit) is one span
// under its caller's, with the statements' SQL and not their arguments; a
// batch outside any trace makes none.
func TestPgxTracerSpansABatch(t *testing.T) {
	exp, tr, pool := tracedPool(t)
	const secret = "ada.lovelace@example.com"
	batch := func(ctx context.Context) {
		var b pgx.Batch
		b.Queue("SELECT $1::text", secret)
		b.Queue("SELECT 2")
		if err := pool.SendBatch(ctx, &b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	batch(context.Background())
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("a batch outside any trace made %d spans, want 0", n)
	}
	ctx, parent := tr.Start(context.Background(), "message")
	batch(ctx)
	parent.End()
	var got []tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		if strings.HasPrefix(sp.Name, "postgres ") {
			got = append(got, sp)
		}
	}
	if len(got) != 1 || got[0].Name != "postgres BATCH" || got[0].Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("postgres spans = %v, want one BATCH under the message's", got)
	}
	if q := attr(got[0], "db.query.text"); q != "SELECT $1::text;\nSELECT 2" {
		t.Errorf("batch query text = %q", q)
	}
	for _, kv := range got[0].Attributes {
		if strings.Contains(kv.Value.String(), secret) {
			t.Errorf("batch span records an argument: %s=%s", kv.Key, kv.Value.String())
		}
	}
}

// TestHTTPTransport: a provider request is a child span named after the
// provider and the path with IDs templated, and no trace header reaches the
// provider.
func TestHTTPTransport(t *testing.T) {
	exp, tr := recorder(t)
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Clone()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	c := &http.Client{Transport: tracing.HTTPTransport("stripe", nil)}
	ctx, parent := tr.Start(context.Background(), "charge")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/payment_intents/pi_3Nk2aB9x/confirm", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	parent.End()
	if v := header.Get("Traceparent"); v != "" {
		t.Errorf("the provider received traceparent %q", v)
	}
	var found bool
	for _, sp := range exp.GetSpans() {
		if sp.Name == "stripe POST /v1/payment_intents/{id}/confirm" {
			found = true
			if sp.Parent.SpanID() != parent.SpanContext().SpanID() {
				t.Error("the request's span is not a child of the caller's")
			}
		}
	}
	if !found {
		t.Errorf("no span named \"stripe POST /v1/payment_intents/{id}/confirm\" in %v", exp.GetSpans())
	}
}

func TestHeaderCarrierAnyCase(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, key := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		ctx := tracing.Propagator.Extract(context.Background(), tracing.HeaderCarrier{key: {tp}})
		if got := trace.SpanContextFromContext(ctx).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("header %s: trace ID %q", key, got)
		}
	}
}

func attr(sp tracetest.SpanStub, key string) string {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// TestSetupExportsOverOTLP: with OTEL_TRACES_EXPORTER=otlp and an endpoint,
// Setup sends the spans to the collector over OTLP/HTTP, named after the
// service; shutdown flushes them.
func TestSetupExportsOverOTLP(t *testing.T) {
	got := make(chan []byte, 10)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		got <- body
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
	}
	for k, v := range env {
		t.Setenv(k, v) // the exporter reads the endpoint itself
	}
	t.Cleanup(func() { tracing.Install(noop.NewTracerProvider()) })
	shutdown, on, err := tracing.Setup(context.Background(), func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "effectively-test-service")
	if err != nil || !on {
		t.Fatalf("Setup = %v, %v; want on", on, err)
	}
	_, span := tracing.Tracer().Start(context.Background(), "exported-span")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case body := <-got:
		for _, want := range []string{"exported-span", "effectively-test-service"} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("the OTLP request does not carry %q", want)
			}
		}
	default:
		t.Fatal("the collector received no spans")
	}
}
