package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterSum is the sum of the counter name's series in g whose labels
// include every pair of labels (nil: all of them); 0 when it has none.
func CounterSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && have[k] == v
			}
			if match {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
