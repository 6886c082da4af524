package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/store"
)

// BacklogSource reads the backlog; *store.Store is one.
type BacklogSource interface {
	Backlog(ctx context.Context) (store.Backlog, error)
}

// backlogCollector reads the gauges from Postgres when Prometheus scrapes:
// the numbers are the database's, never a copy that a restart resets or
// that differs between worker processes (every worker reports the same
// values; aggregate them with max, not sum).
type backlogCollector struct {
	src     BacklogSource
	timeout time.Duration
	logger  *slog.Logger

	inboxPending, inboxAge, outboxPending, outboxAge, quarantine, paymentsOpen, findings, refundsPending, refundsAge, up *prometheus.Desc
}

// RegisterBacklog registers a collector that reads src on each scrape, with
// a timeout (default 2s) so that a slow database does not hang the scrape.
// When the read fails the backlog gauges are left out of that scrape and
// effectively_backlog_up is 0.
func RegisterBacklog(reg prometheus.Registerer, src BacklogSource, timeout time.Duration, logger *slog.Logger) {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if logger == nil {
		logger = slog.Default()
	}
	reg.MustRegister(&backlogCollector{
		src: src, timeout: timeout, logger: logger,
		inboxPending:   prometheus.NewDesc(NameInboxPending, "Inbox rows whose workflow is not started yet.", nil, nil),
		inboxAge:       prometheus.NewDesc(NameInboxOldestAge, "Age of the oldest pending inbox row (0 when none).", nil, nil),
		outboxPending:  prometheus.NewDesc(NameOutboxPending, "Outbox events not yet published.", nil, nil),
		outboxAge:      prometheus.NewDesc(NameOutboxOldestAge, "Age of the oldest unpublished outbox event (0 when none).", nil, nil),
		quarantine:     prometheus.NewDesc(NameQuarantineRows, "Quarantined messages not retried yet, by reason.", []string{"reason"}, nil),
		paymentsOpen:   prometheus.NewDesc(NamePaymentsOpen, "Payments waiting for the provider or an operator, by state (unknown, processing, unexpected).", []string{"state"}, nil),
		findings:       prometheus.NewDesc(NameAuditFindings, "Audit findings not resolved yet, by kind (docs/runbook.md has an entry per kind).", []string{"kind"}, nil),
		refundsPending: prometheus.NewDesc(NameRefundsPending, "Refunds Stripe has not finished (pending): their receipts wait.", nil, nil),
		refundsAge:     prometheus.NewDesc(NameRefundsPendingOldestAge, "Age of the oldest pending refund, from its claim (0 when none).", nil, nil),
		up:             prometheus.NewDesc("effectively_backlog_up", "1 when the backlog gauges could be read from Postgres in this scrape.", nil, nil),
	})
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inboxPending, c.inboxAge, c.outboxPending, c.outboxAge, c.quarantine, c.paymentsOpen, c.findings, c.refundsPending, c.refundsAge, c.up} {
		ch <- d
	}
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	b, err := c.src.Backlog(ctx)
	if err != nil {
		c.logger.Warn("metrics: backlog not read", "error", err.Error())
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.inboxPending, prometheus.GaugeValue, float64(b.InboxPending))
	ch <- prometheus.MustNewConstMetric(c.inboxAge, prometheus.GaugeValue, b.InboxOldestPendingAge)
	ch <- prometheus.MustNewConstMetric(c.outboxPending, prometheus.GaugeValue, float64(b.OutboxUnpublished))
	ch <- prometheus.MustNewConstMetric(c.outboxAge, prometheus.GaugeValue, b.OutboxOldestAge)
	for reason, n := range b.QuarantineByReason {
		ch <- prometheus.MustNewConstMetric(c.quarantine, prometheus.GaugeValue, float64(n), reason)
	}
	for state, n := range b.PaymentsOpen {
		ch <- prometheus.MustNewConstMetric(c.paymentsOpen, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.refundsPending, prometheus.GaugeValue, float64(b.RefundsPending))
	ch <- prometheus.MustNewConstMetric(c.refundsAge, prometheus.GaugeValue, b.RefundsPendingOldestAge)
	for kind, n := range b.AuditFindingsOpen {
		ch <- prometheus.MustNewConstMetric(c.findings, prometheus.GaugeValue, float64(n), kind)
	}
}

// RegisterRetentionHeadroom exports NameRetentionHeadroom: the configured
// retention minus the redelivery horizon the worker checked it against at
// start. Under a day, a change to the broker's redelivery settings or to
// Temporal's namespace retention could make pruning unsafe.
func RegisterRetentionHeadroom(reg prometheus.Registerer, keep, horizon time.Duration) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: NameRetentionHeadroom,
		Help: "Configured retention minus the redelivery horizon, in seconds.",
	}, func() float64 { return (keep - horizon).Seconds() }))
}
