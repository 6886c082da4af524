package bench

import (
	"maps"
	"testing"
	"time"
)

// The dev server's own exposition (Temporal 1.29.1, --metrics-port),
// trimmed: other metrics, another namespace, a label with escapes.
const devServerMetrics = `# HELP action action counter
# TYPE action counter
action{action_type="grpc_StartWorkflowExecution",namespace="default",operation="StartWorkflowExecution",service_name="frontend"} 300
action{action_type="grpc_StartWorkflowExecution",namespace="temporal_system",operation="StartWorkflowExecution",service_name="frontend"} 2
action{action_type="command_BatchMarkers",namespace="default",operation="RespondWorkflowTaskCompleted",service_name="frontend"} 300
action{action_type="command_UpsertWorkflowSearchAttributes",namespace="default",operation="RespondWorkflowTaskCompleted",service_name="frontend"} 3e+02
action_total{action_type="command_BatchMarkers",namespace="default"} 999
actions{action_type="x",namespace="default"} 7
action{action_type="odd \"quoted\" \\ name",namespace="default"} 1 1700000000000
buffered_events_count_bucket{namespace="default",operation="ExecutionStats",service_name="history",le="1"} 1
`

func TestCounterBy(t *testing.T) {
	got, err := counterBy(devServerMetrics, "action", "action_type", map[string]string{"namespace": "default"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"grpc_StartWorkflowExecution":            300,
		"command_BatchMarkers":                   300,
		"command_UpsertWorkflowSearchAttributes": 300,
		`odd "quoted" \ name`:                    1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got, err := counterBy("# nothing yet\n", "action", "action_type", nil); err != nil || len(got) != 0 {
		t.Errorf("no samples: %v, %v", got, err)
	}
	if _, err := counterBy(`action{action_type="x} 1`, "action", "action_type", nil); err == nil {
		t.Error("an unterminated label was accepted")
	}
}

func TestCostsBetween(t *testing.T) {
	t0 := time.Now()
	a := reading{at: t0, actions: map[string]float64{"grpc_StartWorkflowExecution": 10}, commits: 1000, rollbacks: 1}
	b := reading{at: t0.Add(20 * time.Second), actions: map[string]float64{"grpc_StartWorkflowExecution": 110, "command_BatchMarkers": 100},
		commits: 1300, rollbacks: 1}
	c := costsBetween(a, b, 100, "paid message")
	if c.ActionsPer() != 2 || c.Actions["command_BatchMarkers"] != 100 {
		t.Errorf("actions %v, %.2f per unit", c.Actions, c.ActionsPer())
	}
	if c.Commits != 300 || c.Rollbacks != 0 || c.CommitsPer() != 3 {
		t.Errorf("commits %.0f, rollbacks %.0f, %.2f per unit", c.Commits, c.Rollbacks, c.CommitsPer())
	}
	if c.Interval != 20*time.Second {
		t.Errorf("interval %s", c.Interval)
	}
	if s := c.ActionsByType(); s != "BatchMarkers 1.00, StartWorkflowExecution 1.00" {
		t.Errorf("by type: %q", s)
	}
	// A side that could not be read leaves the figure unmeasured.
	u := costsBetween(reading{commits: -1}, b, 100, "x")
	if u.ActionsMeasured() || u.CommitsMeasured() {
		t.Errorf("unreadable readings counted: %+v", u)
	}
}
