package testenv

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
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

// UnreachableIntake is an Intake on a Postgres that cannot be reached
// (nothing listens on port 1: every statement fails to connect within a
// second; pools connect lazily) and a FakeTemporal.
func UnreachableIntake(t testing.TB) *intake.Intake {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	in, err := intake.New(store.New(pool), NewFakeTemporal(), intake.Config{Logger: Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return in
}
