package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
)

// PruneRecordsName is the workflow type of the pruning job that the
// schedule PruneScheduleID starts. Running histories refer to it: never
// rename it.
const PruneRecordsName = "PruneRecords"

func init() { register(PruneRecordsName, func(w *Workflows) any { return w.PruneRecords }) }

// PruneScheduleID is the ID of the Temporal Schedule that runs PruneRecords.
const PruneScheduleID = "effectively-prune-records"

// pruneOptions bound one pruning run. Pruning is idempotent and can wait for
// the next scheduled run, so attempts are few.
func pruneOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		// A run deletes in batches and heartbeats after each; 30 minutes
		// covers a large backlog after a long pause.
		StartToCloseTimeout: 30 * time.Minute,
		// A batch takes well under a minute; a silent minute means a stuck
		// attempt, which is retried.
		HeartbeatTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			// Postgres blips pass in seconds.
			InitialInterval:    10 * time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Minute,
			// The next scheduled run retries anyway; five attempts ride out a
			// short outage without piling up.
			MaximumAttempts: 5,
		},
		Summary: "prune records older than the retention",
	}
}

// PruneRecords deletes processed-message, dispatched inbox and published
// outbox rows older than the worker's retention, by running the Prune
// activity. The retention is the worker's, not an argument: a schedule
// created by an older worker cannot make a newer one prune with a stale
// number.
func (w *Workflows) PruneRecords(ctx workflow.Context, in activities.PruneInput) (activities.PruneResult, error) {
	var res activities.PruneResult
	actx := workflow.WithActivityOptions(ctx, pruneOptions())
	if err := workflow.ExecuteActivity(actx, activities.PruneName, in).Get(ctx, &res); err != nil {
		return res, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}
