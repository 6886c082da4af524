package webhook

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Providers, as the provider label names them.
const (
	ProviderStripe   = "stripe"
	ProviderSendGrid = "sendgrid"
)

// Results of a webhook request, as the result label names them.
const (
	ResultAccepted     = "accepted"      // verified, at least one new event recorded
	ResultDuplicate    = "duplicate"     // verified, every event already recorded
	ResultBadSignature = "bad_signature" // missing or wrong signature
	ResultStale        = "stale"         // signed too long ago (or in the future)
	ResultTooLarge     = "too_large"     // body over the cap
	ResultBadRequest   = "bad_request"   // verified but unusable (not JSON, no ID, wrong API version)
	ResultError        = "error"         // our failure (database, signal): the provider retries
	ResultForeign      = "foreign"       // verified, every event another key namespace's: acknowledged, nothing recorded
)

// Metrics holds the webhook counter. Build it once with NewMetrics.
type Metrics struct {
	requests *prometheus.CounterVec
}

// NewMetrics creates the counter effectively_webhook_requests_total and
// registers it with reg (nil: not registered, for tests). A counter already
// registered by another part of the worker is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_webhook_requests_total",
		Help: "Provider webhook requests by provider (stripe, sendgrid) and result (accepted, duplicate, foreign, bad_signature, stale, too_large, bad_request, error).",
	}, []string{"provider", "result"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			c = existing
		}
	}
	return &Metrics{requests: c}, nil
}

func (m *Metrics) count(provider, result string) {
	if m != nil {
		m.requests.WithLabelValues(provider, result).Inc()
	}
}

// Counter returns the counter, for tests and an exporter.
func (m *Metrics) Counter() *prometheus.CounterVec { return m.requests }
