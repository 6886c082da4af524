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
	// refunds counts the refund state changes Stripe's events made.
	refunds *prometheus.CounterVec
}

// NewMetrics creates the counter effectively_webhook_requests_total and
// registers it with reg (nil: not registered, for tests). A counter already
// registered by another part of the worker is reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_webhook_requests_total",
		Help: "Provider webhook requests by provider (stripe, sendgrid) and result (accepted, duplicate, foreign, bad_signature, stale, too_large, bad_request, error).",
	}, []string{"provider", "result"})
	c, err := register(reg, c)
	if err != nil {
		return nil, err
	}
	rc, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "effectively_refund_updates_total",
		Help: "Refund state changes recorded from Stripe's charge.refund.updated events, by state before (pending, succeeded) and after (succeeded, failed). from=succeeded,to=failed is a refund Stripe reversed after its receipt went out; from=not_created is a refund Stripe holds that the ledger recorded as never created (not applied): an operator follows both up.",
	}, []string{"from", "to"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{requests: c, refunds: rc}, nil
}

// register registers c with reg (nil: not registered), or returns the
// counter already registered under its name.
func register(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, err
		}
		return existing, nil
	}
	return c, nil
}

// countRefund counts a refund's state change.
func (m *Metrics) countRefund(from, to string) {
	if m != nil && m.refunds != nil {
		m.refunds.WithLabelValues(from, to).Inc()
	}
}

// RefundUpdates returns the refund update counter, for tests.
func (m *Metrics) RefundUpdates() *prometheus.CounterVec { return m.refunds }

func (m *Metrics) count(provider, result string) {
	if m != nil {
		m.requests.WithLabelValues(provider, result).Inc()
	}
}

// Counter returns the counter, for tests and an exporter.
func (m *Metrics) Counter() *prometheus.CounterVec { return m.requests }
