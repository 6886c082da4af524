// Package auditschedule keeps the Temporal Schedule that runs the audit
// (workflows.AuditProviders) every AUDIT_EVERY, one hour by default.
package auditschedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
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
	sc := c.ScheduleClient()
	var err error
	// Workers starting at once race: one creates, the others update; a
	// refused update re-reads the schedule on the next try.
	for try := range 5 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
		}
		var h client.ScheduleHandle
		h, err = sc.Create(ctx, client.ScheduleOptions{
			ID: cfg.ID, Spec: spec, Action: action,
			Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Note: "created by the effectively worker",
		})
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			err = fmt.Errorf("create schedule %s: %w", cfg.ID, err)
			continue
		}
		h = sc.GetHandle(ctx, cfg.ID)
		err = h.Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				s := in.Description.Schedule
				s.Spec, s.Action = &spec, action
				if s.Policy == nil {
					s.Policy = &client.SchedulePolicies{}
				}
				s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
				return &client.ScheduleUpdate{Schedule: &s}, nil
			},
		})
		if err == nil {
			return h, nil
		}
		err = fmt.Errorf("update schedule %s: %w", cfg.ID, err)
	}
	return nil, err
}
