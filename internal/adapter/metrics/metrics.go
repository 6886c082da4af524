// Package metrics is the worker's Prometheus instrumentation: the decisions
// the intake and the activities already make, counted; the provider calls,
// timed; the backlog Postgres holds, read at scrape time; and the Temporal
// SDK's own metrics, all on one registry served at /metrics.
//
// Labels carry only bounded, non-personal values: consumer names, decision
// and result names, provider and operation names, HTTP status classes,
// quarantine reasons and payment states. Never a message ID, an order ID,
// an email address or a payment method.
//
// A nil *Metrics is valid and counts nothing, so code paths and tests that
// do not care about metrics need not build one.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names. H4's dashboard and alert rules refer to them: never rename.
const (
	NameIntakeDecisions  = "effectively_intake_decisions_total"
	NameEffectOutcomes   = "effectively_effect_outcomes_total"
	NameProviderDuration = "effectively_provider_request_duration_seconds"
	NameRateLimited      = "effectively_provider_rate_limited_total"
	NameRateWait         = "effectively_provider_rate_wait_seconds"
	NameRateFallback     = "effectively_provider_rate_fallback_total"
	NameRateDeferred     = "effectively_provider_rate_deferred_total"
	NameInboxPending     = "effectively_inbox_pending"
	NameInboxOldestAge   = "effectively_inbox_oldest_pending_age_seconds"
	NameOutboxPending    = "effectively_outbox_unpublished"
	NameOutboxOldestAge  = "effectively_outbox_oldest_unpublished_age_seconds"
	NameQuarantineRows   = "effectively_quarantine_rows"
	NamePaymentsOpen     = "effectively_payments_open"
	NameRefundsPending   = "effectively_refunds_pending"
	// NameRefundsPendingOldestAge is the age of the oldest pending refund.
	NameRefundsPendingOldestAge = "effectively_refunds_pending_oldest_age_seconds"
	NameAuditFindings           = "effectively_audit_findings_open"
	NameRetentionHeadroom       = "effectively_retention_headroom_seconds"
	NameSourceSettlements       = "effectively_source_settlements_total"
	NameDeadLetters             = "effectively_source_dead_letters_total"
	NameSetupTimeouts           = "effectively_source_setup_timeouts_total"
)

// Decision is the value of the decision label of NameIntakeDecisions.
type Decision string

// The intake's decisions about a received message.
const (
	// DecisionStarted: this process started the message's workflow.
	DecisionStarted Decision = "started"
	// DecisionDuplicate: a copy of a message already in the inbox (same
	// payload): counted and acknowledged, nothing started.
	DecisionDuplicate Decision = "duplicate"
	// DecisionBusinessDuplicate: another message already holds the order;
	// nothing charged (decided by the payment activity's claim).
	DecisionBusinessDuplicate Decision = "business_duplicate"
	// DecisionPayloadMismatch: a known message ID with a different payload,
	// quarantined.
	DecisionPayloadMismatch Decision = "payload_mismatch"
	// DecisionInvalid: a message that does not decode or validate,
	// quarantined.
	DecisionInvalid Decision = "invalid"
	// DecisionMaxDeliver: a message the inbox could not take within the
	// broker's deliveries, quarantined with its raw bytes.
	DecisionMaxDeliver Decision = "max_deliver"
)

// Effect is the value of the effect label of NameEffectOutcomes.
type Effect string

// The effects.
const (
	EffectPayment       Effect = "payment"
	EffectReceipt       Effect = "receipt"
	EffectRefund        Effect = "refund"
	EffectRefundReceipt Effect = "refund_receipt"
)

// Result is the value of the result label of NameEffectOutcomes.
type Result string

// Results of the payment effect.
const (
	// ResultPaid: charged now, Stripe's first answer.
	ResultPaid Result = "paid"
	// ResultDeclined: refused by Stripe (decline or invalid request), recorded.
	ResultDeclined Result = "declined"
	// ResultReplayed: the outcome came from Stripe's idempotency layer or
	// from the Postgres record: no new charge.
	ResultReplayed Result = "replayed"
	// ResultReconciled: an ambiguous answer settled by looking the payment up.
	ResultReconciled Result = "reconciled"
	// ResultUnknown: the outcome could not be established; an operator must
	// resolve it.
	ResultUnknown Result = "unknown"
	// ResultFenced: a later claim owns the ledger row; this attempt's
	// result was discarded.
	ResultFenced Result = "fenced"
	// ResultProcessing: Stripe answered processing; the workflow waits.
	ResultProcessing Result = "processing"
	// ResultUnexpected: Stripe answered a status the code does not expect.
	ResultUnexpected Result = "unexpected"
	// ResultProviderAuth: the provider refused our API key or base URL
	// (401, 403; SendGrid 404 or a redirect). Retried, never recorded as
	// the effect's outcome; EffectivelyProviderAuth alerts on it.
	ResultProviderAuth Result = "provider_auth"
)

// Results of the receipt effect (ResultReplayed too: a send already in the
// ledger, not sent again).
const (
	// ResultSent: SendGrid accepted the receipt now.
	ResultSent Result = "sent"
	// ResultFailed: SendGrid refused the receipt for good (and, for a
	// refund, Stripe refused it).
	ResultFailed Result = "failed"
	// ResultRefunded: Stripe made the refund now.
	ResultRefunded Result = "refunded"
)

// Metrics holds the worker's own collectors. Build it once per process
// with New.
type Metrics struct {
	intakeDecisions  *prometheus.CounterVec
	effectOutcomes   *prometheus.CounterVec
	providerDuration *prometheus.HistogramVec
	settlements      *prometheus.CounterVec
	deadLetters      *prometheus.CounterVec
	setupTimeouts    *prometheus.CounterVec
	rateLimited      *prometheus.CounterVec
	rateWait         *prometheus.HistogramVec
	rateFallback     *prometheus.CounterVec
	rateDeferred     *prometheus.CounterVec
}

// New creates the worker's collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		intakeDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameIntakeDecisions,
			Help: "Messages by the intake's decision: started, duplicate, business_duplicate, payload_mismatch, invalid, max_deliver.",
		}, []string{"consumer", "decision"}),
		effectOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameEffectOutcomes,
			Help: "Effect attempts by outcome: payment paid, declined, replayed, reconciled, unknown, fenced, processing, unexpected; receipt and refund_receipt sent, replayed, failed, unknown; refund refunded, failed, replayed, reconciled; provider_auth for any.",
		}, []string{"effect", "result"}),
		providerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: NameProviderDuration,
			Help: "Duration of HTTP requests to Stripe and SendGrid, by operation and status class (2xx, 4xx, 5xx, error for no answer).",
			// From a fast simulator answer to a provider at its timeout.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "operation", "status_class"}),
		settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameSourceSettlements,
			Help: "Deliveries by source and settlement: ack (in the inbox), retry (handed back: not recorded), quarantined.",
		}, []string{"source", "settle"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameDeadLetters,
			Help: "Messages a broker gave up delivering with no worker settling them (JetStream's max-delivery advisories, RabbitMQ's dead-letter queue), each then recorded or quarantined, by source.",
		}, []string{"source"}),
		setupTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameSetupTimeouts,
			Help: "Connections a source closed because the broker left a setup call (channel, declaration, QoS, consume) unanswered past its bound, by source; the source then connects again.",
		}, []string{"source"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRateLimited,
			Help: "429 answers of Stripe and SendGrid, by endpoint and reason (Stripe-Rate-Limited-Reason, or 429); each pauses every worker.",
		}, []string{"provider", "operation", "reason"}),
		rateWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameRateWait,
			Help:    "How long requests that had to wait for the shared rate limit waited, before being sent (not an attempt's failure).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"provider"}),
		rateFallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRateFallback,
			Help: "Requests paced by the process's own bucket because Postgres did not answer the shared one.",
		}, []string{"provider"}),
		rateDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameRateDeferred,
			Help: "Requests not sent because the shared rate limit had no slot within their wait: retried when it has one (Temporal's NextRetryDelay), not failures.",
		}, []string{"provider"}),
	}
	reg.MustRegister(m.intakeDecisions, m.effectOutcomes, m.providerDuration, m.settlements, m.deadLetters, m.setupTimeouts, m.rateLimited, m.rateWait, m.rateFallback, m.rateDeferred)
	return m
}

// IntakeDecision counts one decision of the intake about a message of
// consumer (a consumer name, never a message's content; "" is counted as
// "unknown": a message too broken to name its consumer).
func (m *Metrics) IntakeDecision(consumer string, d Decision) {
	if m == nil {
		return
	}
	if consumer == "" {
		consumer = "unknown"
	}
	m.intakeDecisions.WithLabelValues(consumer, string(d)).Inc()
}

// SourceSettlement counts one delivery of source (a configured source's
// name) by how it was settled (intake.Settlement).
func (m *Metrics) SourceSettlement(source, settle string) {
	if m == nil {
		return
	}
	m.settlements.WithLabelValues(source, settle).Inc()
}

// DeadLetter counts one message source's broker gave up delivering
// unsettled, taken up from its dead letter and settled.
func (m *Metrics) DeadLetter(source string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(source).Inc()
}

// SetupTimeout counts one connection of source closed because the broker
// did not answer its setup in time.
func (m *Metrics) SetupTimeout(source string) {
	if m == nil {
		return
	}
	m.setupTimeouts.WithLabelValues(source).Inc()
}

// EffectOutcome counts one outcome of an effect attempt.
func (m *Metrics) EffectOutcome(e Effect, r Result) {
	if m == nil {
		return
	}
	m.effectOutcomes.WithLabelValues(string(e), string(r)).Inc()
}

// RateWaited counts a request that waited d for the shared rate limit
// (internal/adapter/ratelimit's Observer).
func (m *Metrics) RateWaited(provider, _ string, d time.Duration) {
	m.rateWait.WithLabelValues(provider).Observe(d.Seconds())
}

// RateLimited counts a 429 of provider at operation.
func (m *Metrics) RateLimited(provider, operation, reason string, _ time.Duration) {
	m.rateLimited.WithLabelValues(provider, operation, reason).Inc()
}

// RateFallback counts a request paced without Postgres.
func (m *Metrics) RateFallback(provider string) { m.rateFallback.WithLabelValues(provider).Inc() }

// RateDeferred counts a request the shared limit sent back to wait.
func (m *Metrics) RateDeferred(provider, _ string, _ time.Duration) {
	m.rateDeferred.WithLabelValues(provider).Inc()
}
