package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestServerWindow: the window between two readings of a server's metrics
// takes the frontend's latencies only (the dev server reports each request
// again under history), the workflow task timeouts and the heartbeat
// timeouts.
func TestServerWindow(t *testing.T) {
	var page string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	read := func(lines ...string) serverReading {
		page = "# HELP x\n" + strings.Join(lines, "\n") + "\n"
		r, err := readServer(context.Background(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := read(`service_latency_sum{operation="StartWorkflowExecution",service_name="frontend"} 1`,
		`service_latency_count{operation="StartWorkflowExecution",service_name="frontend"} 10`,
		`service_latency_count{operation="StartWorkflowExecution",service_name="history"} 10`)
	b := read(`service_latency_sum{operation="StartWorkflowExecution",service_name="frontend"} 7`,
		`service_latency_count{operation="StartWorkflowExecution",service_name="frontend"} 40`,
		`service_latency_count{operation="StartWorkflowExecution",service_name="history"} 40`,
		`start_to_close_timeout{operation="TimerActiveTaskWorkflowTaskTimeout",service_name="history"} 3`,
		`start_to_close_timeout{operation="TimerActiveTaskActivityTimeout",service_name="history"} 5`,
		`activity_task_timeout{timeout_type="Heartbeat"} 2`,
		`service_error_with_type{error_type="serviceerror_WorkflowExecutionAlreadyStarted",operation="StartWorkflowExecution",service_name="frontend"} 4`,
		`service_error_with_type{error_type="serviceerror_WorkflowExecutionAlreadyStarted",operation="StartWorkflowExecution",service_name="history"} 4`,
		`activity_task_timeout{timeout_type="StartToClose"} 9`,
		`task_latency_queue_sum{operation="TransferActiveTaskActivity",service_name="history"} 0.5`,
		`task_latency_queue_count{operation="TransferActiveTaskActivity",service_name="history"} 10`,
		`task_latency_queue_sum{operation="TimerActiveTaskActivityTimeout",service_name="history"} 9`,
		`task_latency_queue_count{operation="TimerActiveTaskActivityTimeout",service_name="history"} 1`)
	w := window(a, b)
	if len(w.TransferQueueMean) != 1 || w.TransferQueueMean["Activity"] != 50*time.Millisecond || w.Requests["StartWorkflowExecution"] != 30 {
		t.Fatalf("window = %+v, want the transfer activity tasks queued 50ms on average (no timer task) and 30 starts asked", w)
	}
	if w.StartMean != 200*time.Millisecond || w.Starts != 30 || w.TaskTimeouts != 3 || w.HeartbeatTimeouts != 2 || w.AlreadyStarted != 4 || w.RespondMean != 0 {
		t.Fatalf("window = %+v, want 30 starts at 200ms (4 already started), 3 task timeouts, 2 heartbeat timeouts", w)
	}
	if _, _, _, ok := promLine("no value here"); ok {
		t.Fatal("a line without a number parsed")
	}
}
