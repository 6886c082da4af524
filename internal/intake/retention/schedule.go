package retention

// The Temporal side of retention: the Schedule that runs the PruneRecords
// workflow, and the namespace retention the horizon depends on. The
// deleting is the Prune activity's.

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/workflows"
)

// DefaultEvery is how often the schedule runs PruneRecords by default.
const DefaultEvery = time.Hour

// ScheduleConfig configures the pruning schedule. Zero values take the
// defaults noted per field.
type ScheduleConfig struct {
	// ID of the schedule. Default workflows.PruneScheduleID.
	ID string
	// Every is the interval between runs. Default DefaultEvery.
	Every time.Duration
	// TaskQueue the workflow runs on. Default workflows.DefaultTaskQueue.
	TaskQueue string
	// BatchSize is the rows deleted per statement. Default
	// activities.DefaultPruneBatch.
	BatchSize int
}

func (c ScheduleConfig) withDefaults() ScheduleConfig {
	if c.ID == "" {
		c.ID = workflows.PruneScheduleID
	}
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.TaskQueue == "" {
		c.TaskQueue = workflows.DefaultTaskQueue
	}
	if c.BatchSize <= 0 {
		c.BatchSize = activities.DefaultPruneBatch
	}
	return c
}

// EnsureSchedule creates the pruning schedule, or updates an existing one to
// cfg, so that every worker start leaves exactly one schedule with the
// current settings. Runs never overlap: a run still going when the next is
// due makes the schedule skip that one.
func EnsureSchedule(ctx context.Context, c client.Client, cfg ScheduleConfig) (client.ScheduleHandle, error) {
	cfg = cfg.withDefaults()
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: cfg.Every}}}
	action := &client.ScheduleWorkflowAction{
		// The server appends the scheduled time to this ID.
		ID:        cfg.ID,
		Workflow:  workflows.PruneRecordsName,
		Args:      []any{activities.PruneInput{BatchSize: cfg.BatchSize}},
		TaskQueue: cfg.TaskQueue,
		// A run that cannot finish within a period is abandoned for the next.
		WorkflowExecutionTimeout: max(cfg.Every, time.Hour),
		StaticSummary:            "Delete processed-message, inbox and outbox rows older than the retention, and quarantine rows older than the quarantine retention",
	}
	return temporalclient.EnsureSchedule(ctx, c, cfg.ID, spec, action)
}

// NamespaceRetention returns how long namespace keeps closed workflow runs:
// Temporal remembers a workflow ID that long after the run closed.
func NamespaceRetention(ctx context.Context, c client.Client, namespace string) (time.Duration, error) {
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return 0, fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	ttl := resp.GetConfig().GetWorkflowExecutionRetentionTtl()
	if ttl == nil {
		return 0, fmt.Errorf("namespace %s reports no workflow retention", namespace)
	}
	return ttl.AsDuration(), nil
}

// ReadPolicy reads namespace's retention from Temporal, computes the horizon
// with the longest of the sources' horizons (none when no broker delivers
// messages), and checks keep against it. The
// worker calls it before it starts anything: a retention shorter than the
// horizon is refused with an error naming both.
func ReadPolicy(ctx context.Context, c client.Client, namespace string, keep time.Duration, sources ...SourceHorizon) (Policy, error) {
	nsRetention, err := NamespaceRetention(ctx, c, namespace)
	if err != nil {
		return Policy{}, err
	}
	h, err := Compute(Inputs{Sources: sources, NamespaceRetention: nsRetention})
	if err != nil {
		return Policy{}, fmt.Errorf("retention horizon: %w", err)
	}
	p := Policy{Keep: keep, Horizon: h}
	if err := p.Check(); err != nil {
		return Policy{}, fmt.Errorf("RETENTION: %w", err)
	}
	return p, nil
}

// WithQuarantine returns p with the quarantine retention keep
// (QUARANTINE_RETENTION). A keep shorter than p's horizon is refused with an
// error naming the variable and both durations: the worker then refuses to
// start, as it does for RETENTION.
func WithQuarantine(p Policy, keep time.Duration) (Policy, error) {
	p.Quarantine = keep
	if keep <= 0 {
		return Policy{}, fmt.Errorf("QUARANTINE_RETENTION=%s: must be positive", keep)
	}
	if err := p.CheckQuarantine(); err != nil {
		return Policy{}, fmt.Errorf("QUARANTINE_RETENTION: %w", err)
	}
	return p, nil
}
