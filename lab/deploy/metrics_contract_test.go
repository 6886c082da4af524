package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/intake/webhook"
)

// registerWorkerMetrics registers every metric the worker exports on reg,
// with the same constructors worker/main.go calls: the dashboard and alert
// tests check their expressions against the collectors the worker really
// registers.
func registerWorkerMetrics(reg prometheus.Registerer) error {
	metrics.New(reg)
	metrics.RegisterBacklog(reg, nil, 0, nil)
	metrics.RegisterRetentionHeadroom(reg, time.Hour, time.Minute)
	if _, err := httpapi.NewMetrics(reg); err != nil {
		return err
	}
	_, err := webhook.NewMetrics(reg)
	return err
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
