package testenv

import (
	"context"
	"maps"
	"sync"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// FakeTemporal stands in for the Temporal client in tests that are about
// the inbox and a broker. Like the server, it starts a workflow ID once and
// refuses it after that. Any other client method panics.
type FakeTemporal struct {
	client.Client
	mu      sync.Mutex
	started map[string]int
}

// NewFakeTemporal returns a FakeTemporal that has started nothing.
func NewFakeTemporal() *FakeTemporal { return &FakeTemporal{started: map[string]int{}} }

// ExecuteWorkflow starts opts.ID once; a second start is refused as already
// started.
func (f *FakeTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started[opts.ID] > 0 {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	f.started[opts.ID]++
	return nil, nil
}

// Starts returns how often each workflow ID was started.
func (f *FakeTemporal) Starts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.started)
}
