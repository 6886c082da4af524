package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
)

// AuditProvidersName is the workflow type of the audit that the schedule
// AuditScheduleID starts. Running histories refer to it: never rename it.
const AuditProvidersName = "AuditProviders"

func init() { register(AuditProvidersName, func(w *Workflows) any { return w.AuditProviders }) }

// AuditScheduleID is the ID of the Temporal Schedule that runs
// AuditProviders.
const AuditScheduleID = "effectively-audit"

// AuditCheckpoint is the checkpoint the scheduled audit resumes from.
const AuditCheckpoint = "schedule"

// auditOptions bound one audit run. The audit is idempotent and resumes
// from its checkpoint, so attempts are few.
func auditOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		// A run makes at most its budget of Stripe requests (1,000 by
		// default, well under 10 minutes even at 25 requests/s).
		StartToCloseTimeout: 30 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			// A Stripe or Postgres blip passes in seconds.
			InitialInterval:    30 * time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Minute,
			// The next scheduled run goes on from the checkpoint anyway.
			MaximumAttempts: 3,
		},
		Summary: "audit the ledger against Stripe and SendGrid",
	}
}

// AuditProviders runs the AuditLedger activity once, from checkpoint
// in.Checkpoint (AuditCheckpoint when empty).
func (w *Workflows) AuditProviders(ctx workflow.Context, in activities.AuditInput) (activities.AuditResult, error) {
	if in.Checkpoint == "" {
		in.Checkpoint = AuditCheckpoint
	}
	var res activities.AuditResult
	actx := workflow.WithActivityOptions(ctx, auditOptions())
	if err := workflow.ExecuteActivity(actx, activities.AuditLedgerName, in).Get(ctx, &res); err != nil {
		return res, fmt.Errorf("audit: %w", err)
	}
	return res, nil
}
