package bench

import "testing"

// A few lines of a real `perf report --children --sort symbol --stdio -g
// none` of the dev server, during an e2e round.
const perfReportSample = `# Samples: 5K of event 'cpu-clock'
#
# Children      Self  Symbol
#
    38.23%     0.00%  [.] go.temporal.io/server/service/history.(*visibilityQueueTaskExecutor).Execute                      -      -
    35.36%     0.00%  [.] google.golang.org/grpc.(*Server).handleStream                                                      -      -
    19.38%     0.03%  [.] modernc.org/sqlite.(*conn).step                                                                    -      -
    19.11%     0.00%  [.] go.temporal.io/server/service/history.(*visibilityQueueTaskExecutor).processCloseExecution        -      -
    19.08%     0.00%  [.] go.temporal.io/server/service/history.(*visibilityQueueTaskExecutor).processStartExecution        -      -
     5.79%     0.00%  [.] go.temporal.io/server/common/persistence.(*executionManagerImpl).CreateWorkflowExecution            -      -
     5.73%     0.00%  [.] go.temporal.io/server/common/persistence.(*executionManagerImpl).GetWorkflowExecution               -      -
     5.03%     0.00%  [.] runtime.gcBgMarkWorker                                                                             -      -
     5.03%     0.00%  [.] runtime.gcBgMarkWorker.func2                                                                       -      -
     2.76%     2.76%  [.] modernc.org/libc.Xmemcpy                                                                           -      -
`

func TestComponentSharesReadPerfReport(t *testing.T) {
	got := componentShares(perfReportSample)
	want := map[string]float64{
		"visibility tasks": 38.23, "visibility: the start's record": 19.08, "visibility: the close's record": 19.11,
		"gRPC requests": 35.36, "workflow state: create": 5.79, "workflow state: read": 5.73,
		"SQLite statements": 19.38, "garbage collection": 5.03,
		// Absent from the sample: 0, not missing.
		"transfer tasks": 0, "workflow state: update": 0,
	}
	if len(got) != len(ServerComponents) {
		t.Errorf("%d components, want %d: %v", len(got), len(ServerComponents), got)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}
