package workflows

import (
	"fmt"
	"maps"
	"slices"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// StatusQuery is the name of the query that returns a workflow's status.
const StatusQuery = "status"

// Stage is where a workflow stands, as the status query reports it. Each
// workflow's own stages are in its file.
type Stage string

// Stages shared by OrderPlaced and OrderRefund.
const (
	StageSendingReceipt Stage = "sending_receipt"
	StageCompleted      Stage = "completed"
)

// Outcome is how a workflow ended, in its status and result; one that ends
// on a payment's or refund's outcome has that outcome's value. Each
// workflow's own outcomes are in its file.
type Outcome string

// Outcomes shared by OrderPlaced and OrderRefund: the effect was made once,
// then its receipt was refused for good, or may not have gone out
// (at-most-once).
const (
	OutcomeReceiptFailed  Outcome = "receipt_failed"
	OutcomeReceiptUnknown Outcome = "receipt_unknown"
)

// Workflows holds the workflow implementations and their configuration.
type Workflows struct {
	cfg Config
}

// New validates cfg and returns the workflows configured by it.
func New(cfg Config) (*Workflows, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("workflow config: %w", err)
	}
	return &Workflows{cfg: cfg.withDefaults()}, nil
}

// registered maps each workflow type name to its method; each workflow's
// file adds its entry from init (register), so a new workflow touches only
// its own file.
var registered = map[string]func(w *Workflows) any{}

// register adds the workflow name, whose method fn returns.
func register(name string, fn func(w *Workflows) any) {
	if _, dup := registered[name]; dup {
		panic("workflow " + name + " registered twice")
	}
	registered[name] = fn
}

// Register registers every workflow with r under its stable name. A route's
// workflow missing here fails internal/intake/route's TestChecklist.
func (w *Workflows) Register(r worker.WorkflowRegistry) {
	for _, name := range slices.Sorted(maps.Keys(registered)) {
		r.RegisterWorkflowWithOptions(registered[name](w), workflow.RegisterOptions{Name: name})
	}
}
