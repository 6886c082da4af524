// Package auditschedule keeps the Temporal Schedule that runs the audit
// (workflows.AuditProviders) every AUDIT_EVERY, one hour by default.
package auditschedule

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/workflows"
)

// DefaultEvery is how often the audit runs by default.
const DefaultEvery = time.Hour

// Config configures the audit schedule. Zero values take the defaults.
type Config struct {
	// ID of the schedule. Default workflows.AuditScheduleID.
	ID string
	// Every is the interval between runs. Default DefaultEvery.
	Every time.Duration
	// TaskQueue the workflow runs on. Default workflows.DefaultTaskQueue.
	TaskQueue string
}

// Ensure creates the audit schedule, or updates an existing one to cfg, so
// that every worker start leaves exactly one with the current settings.
// Runs never overlap: one still going when the next is due skips it.
func Ensure(ctx context.Context, c client.Client, cfg Config) (client.ScheduleHandle, error) {
	if cfg.ID == "" {
		cfg.ID = workflows.AuditScheduleID
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.TaskQueue == "" {
		cfg.TaskQueue = workflows.DefaultTaskQueue
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: cfg.Every}}}
	action := &client.ScheduleWorkflowAction{
		ID:                       cfg.ID, // the server appends the scheduled time
		Workflow:                 workflows.AuditProvidersName,
		Args:                     []any{activities.AuditInput{Checkpoint: workflows.AuditCheckpoint}},
		TaskQueue:                cfg.TaskQueue,
		WorkflowExecutionTimeout: max(cfg.Every, time.Hour),
		StaticSummary:            "Compare the ledger with Stripe's PaymentIntents and Refunds and SendGrid's events; findings go to audit_findings",
	}
	return temporalclient.EnsureSchedule(ctx, c, cfg.ID, spec, action)
}
