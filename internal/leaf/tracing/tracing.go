// Package tracing sets up OpenTelemetry tracing for the worker: one trace per
// message, from the intake through the workflow and its activities
// (Temporal's tracing interceptor) to the Stripe and SendGrid HTTP calls and
// the Postgres queries they make.
//
// Tracing is off unless the standard OpenTelemetry variables ask for it:
//
//   - OTEL_SDK_DISABLED=true turns it off whatever else is set.
//   - OTEL_TRACES_EXPORTER=otlp turns it on; none (or unset) leaves it off,
//     except that an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) given without OTEL_TRACES_EXPORTER
//     turns it on too.
//   - OTEL_EXPORTER_OTLP_PROTOCOL (or …_TRACES_PROTOCOL) is http/protobuf
//     (the default, port 4318) or grpc (port 4317).
//   - The exporter reads the rest itself: endpoint, headers, timeout,
//     compression, TLS (OTEL_EXPORTER_OTLP_*); the SDK reads the sampler
//     (OTEL_TRACES_SAMPLER, default parentbased_always_on) and the batch
//     processor's limits (OTEL_BSP_*); OTEL_SERVICE_NAME and
//     OTEL_RESOURCE_ATTRIBUTES name the process.
//
// Spans never carry personal data: no customer email, no payment method, no
// query arguments. Message IDs, workflow IDs, order IDs and SQL text (with its
// placeholders) are what identify a span.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// ScopeName is the instrumentation scope of the spans this module makes
// itself (intake, Postgres).
const ScopeName = "github.com/effectively/effectively"

// Propagator is the W3C trace context (traceparent, tracestate) and baggage:
// what a publisher sets in the NATS headers and what Temporal carries in
// workflow and activity headers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Settings is what the OTEL_* variables ask for.
type Settings struct {
	// Enabled is true when spans are exported.
	Enabled bool
	// Protocol is grpc or http/protobuf.
	Protocol string
}

// Lookup reads one environment variable; config.OTelLookup in production.
type Lookup func(string) (string, bool)

// ReadSettings decides from the OTEL_* variables whether traces are
// exported, and how; it names the variable at fault.
func ReadSettings(env Lookup) (Settings, error) {
	get := func(name string) string {
		v, _ := env(name)
		return strings.TrimSpace(v)
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return Settings{}, nil
	}
	var s Settings
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return Settings{}, nil
	case "":
		s.Enabled = get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "otlp":
		s.Enabled = true
	default:
		return Settings{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: use otlp or none", exp)
	}
	s.Protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if s.Protocol == "" {
		s.Protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch s.Protocol {
	case "":
		s.Protocol = "http/protobuf"
	case "http/protobuf", "grpc":
	default:
		return Settings{}, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: use http/protobuf or grpc", s.Protocol)
	}
	if !s.Enabled {
		return Settings{}, nil
	}
	return s, nil
}

// Setup installs the global tracer provider and propagator the OTEL_*
// variables ask for (see the package comment) and returns a shutdown that
// flushes the spans still buffered; call it before the process exits.
// Tracing off, it installs nothing, reports enabled false and returns a
// shutdown that does nothing. serviceName is the default of
// OTEL_SERVICE_NAME.
func Setup(ctx context.Context, env Lookup, serviceName string) (shutdown func(context.Context) error, enabled bool, err error) {
	noop := func(context.Context) error { return nil }
	s, err := ReadSettings(env)
	if err != nil || !s.Enabled {
		return noop, false, err
	}
	var exp *otlptrace.Exporter
	if s.Protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return noop, false, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES override the default
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, false, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	// An unreachable collector costs spans, never messages: its errors are
	// structured log lines like the rest.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		slog.Default().Warn("opentelemetry: spans not exported", "error", err.Error())
	}))
	return tp.Shutdown, true, nil
}

// Install makes tp the global tracer provider and Propagator the global
// propagator. Tests install a provider with an in-memory exporter.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
}

// Tracer is the tracer of the spans this module makes, from the global
// provider.
func Tracer() trace.Tracer { return otel.Tracer(ScopeName) }

// TemporalInterceptor is Temporal's OpenTelemetry interceptor: set on a
// client, it makes a span for each workflow start, workflow run, activity
// start and activity run (local ones included) of the client and its
// workers, and carries the trace in the workflow and activity headers, so a
// message's workflow and activities join the intake's trace.
func TemporalInterceptor() (interceptor.ClientInterceptor, error) {
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		TextMapPropagator: Propagator,
		// Queries are operators looking; they are not part of a message's path.
		DisableQueryTracing: true,
	})
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return i, nil
}

// HTTPTransport wraps base (http.DefaultTransport when nil) so that every
// request to provider is a client span of the caller's trace, named
// "<provider> <METHOD> <path>" with IDs in the path replaced by {id}. The
// trace context is not sent to the provider: a third party has no use for
// our trace IDs.
func HTTPTransport(provider string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return provider + " " + r.Method + " " + pathTemplate(r.URL.Path)
		}),
	)
}

// pathTemplate replaces the segments of an API path that are object IDs
// (pi_3Nk…, evt_1…: an underscore and a digit) with {id}, so span names stay few.
func pathTemplate(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.Contains(s, "_") && strings.ContainsAny(s, "0123456789") {
			segs[i] = "{id}"
		}
	}
	return strings.Join(segs, "/")
}

// HeaderCarrier adapts message headers (nats.Header, http.Header: a
// map[string][]string) to the propagator. Get matches the key in any case:
// publishers write traceparent, Traceparent or TRACEPARENT.
type HeaderCarrier map[string][]string

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values of key.
func (h HeaderCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the keys.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
