package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Metrics are the API's: requests by route and status, their duration,
// and the requests waiting for an outcome.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	waiters  prometheus.Gauge
}

// NewMetrics creates effectively_api_requests_total{route,code},
// effectively_api_request_duration_seconds{route} and
// effectively_api_waiters, registered with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "effectively_api_requests_total",
			Help: "HTTP API requests by route (the pattern, or unmatched) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "effectively_api_request_duration_seconds",
			Help:    "HTTP API request duration by route, waits included.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "effectively_api_waiters",
			Help: "HTTP API requests holding their answer for Prefer: wait.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.waiters} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// Requests returns the request counter, for tests.
func (m *Metrics) Requests() *prometheus.CounterVec { return m.requests }

// Metrics returns the API's metrics.
func (a *API) Metrics() *Metrics { return a.metrics }

// requestInfo is what the handlers tell the request log.
type requestInfo struct {
	token     string
	messageID string
}

type infoKey struct{}

func infoOf(r *http.Request) *requestInfo {
	if i, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// observe counts, times, logs and traces each request. A client's
// traceparent is continued: the span is the parent of the workflow start,
// which carries it into the workflow and on to the provider calls. The log
// line names the route, status, token name and message ID: no body, no
// header values, no personal data.
func (a *API) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		ctx := context.WithValue(r.Context(), infoKey{}, info)
		ctx = tracing.Propagator.Extract(ctx, tracing.HeaderCarrier(r.Header))
		ctx, span := tracing.Tracer().Start(ctx, "api "+r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		span.SetName(route)
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code), attribute.String("message.id", info.messageID))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.code))
		}
		took := time.Since(start)
		a.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		a.metrics.duration.WithLabelValues(route).Observe(took.Seconds())
		a.cfg.Logger.Info("api request", "route", route, "status", sw.code, "took_ms", took.Milliseconds(),
			"token", info.token, "message_id", info.messageID)
	})
}
