package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registerWorkerMetrics registers every metric the worker exports on reg.
// It is the one place the dashboard and alert tests learn the worker's
// metric names from.
//
// LEAD: once internal/metrics (H3) is merged, replace the body with
//
//	_, err := metrics.New(reg)
//	return err
//
// and delete contractMetrics: the tests then check the dashboard and the
// alerts against the collectors the worker really registers.
func registerWorkerMetrics(reg prometheus.Registerer) error {
	for _, c := range contractMetrics() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// contractMetrics are the metric names agreed for the worker (the brief's
// shared contract), until internal/metrics exists.
func contractMetrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "effectively_intake_decisions_total", Help: "x"}, []string{"consumer", "decision"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "effectively_effect_outcomes_total", Help: "x"}, []string{"effect", "result"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "effectively_provider_request_duration_seconds", Help: "x"}, []string{"provider", "operation", "status_class"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "effectively_inbox_pending", Help: "x"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "effectively_inbox_oldest_pending_age_seconds", Help: "x"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "effectively_outbox_unpublished", Help: "x"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "effectively_outbox_oldest_unpublished_age_seconds", Help: "x"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "effectively_quarantine_rows", Help: "x"}, []string{"reason"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "effectively_payments_open", Help: "x"}, []string{"state"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "effectively_retention_headroom_seconds", Help: "x"}),
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "effectively_webhook_requests_total", Help: "x"}, []string{"provider", "result"}),
	}
}

// nameRecorder is a prometheus.Registerer that keeps the names of what is
// registered on it: the collectors' descriptors, whether or not any series
// was observed yet (a Gatherer would show only those).
type nameRecorder struct{ names map[string]bool }

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *nameRecorder) Register(c prometheus.Collector) error {
	if r.names == nil {
		r.names = map[string]bool{}
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *nameRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *nameRecorder) Unregister(prometheus.Collector) bool { return false }

// exportedMetricNames returns the names of the worker's metrics.
func exportedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	var rec nameRecorder
	if err := registerWorkerMetrics(&rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.names) == 0 {
		t.Fatal("the worker registers no metrics")
	}
	return rec.names
}

// metricRef finds the worker's metric names in a PromQL expression.
var metricRef = regexp.MustCompile(`\b(effectively_[a-z0-9_]+|temporal_[a-z0-9_]+)\b`)

// unknownMetrics returns the names expr uses that the worker does not
// export. A histogram's series (_bucket, _sum, _count) count as its name.
func unknownMetrics(expr string, exported map[string]bool) []string {
	var out []string
	for _, m := range metricRef.FindAllString(expr, -1) {
		if exported[m] {
			continue
		}
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
				base = ""
				break
			}
		}
		if base != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
