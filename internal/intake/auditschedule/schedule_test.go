package auditschedule_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/auditschedule"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestScheduleRunsTheAudit: Ensure leaves one schedule with the interval
// and the AuditProviders action, an update keeps it one; a triggered run
// audits through a real worker against the simulators and finds the
// charge whose record was deleted, once.
func TestScheduleRunsTheAudit(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{Audit: audit.Config{Lag: time.Second, Lookback: time.Hour}})
	ctx := context.Background()
	raw := `{"id":"evt_sched","type":"order.placed","data":{"order_id":1,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`
	if _, err := s.Intake.Accept(ctx, []byte(raw), "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.GetWorkflow(ctx, "order-placed/evt_sched", "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Pool().Exec(ctx, `DELETE FROM payments WHERE message_id = 'evt_sched'`); err != nil {
		t.Fatal(err)
	}
	// Past the audit's lag, and the second its window is truncated to.
	time.Sleep(2500 * time.Millisecond)

	cfg := auditschedule.Config{Every: 3 * time.Hour, TaskQueue: s.TaskQueue}
	if _, err := auditschedule.Ensure(ctx, s.Client, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Every = 2 * time.Hour
	h, err := auditschedule.Ensure(ctx, s.Client, cfg) // the next worker start: an update
	if err != nil {
		t.Fatal(err)
	}
	desc, err := h.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	act, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	if !ok || act.Workflow != workflows.AuditProvidersName || act.TaskQueue != s.TaskQueue ||
		len(desc.Schedule.Spec.Intervals) != 1 || desc.Schedule.Spec.Intervals[0].Every != 2*time.Hour {
		t.Fatalf("schedule %+v, action %+v; want AuditProviders every 2h on %s", desc.Schedule.Spec, desc.Schedule.Action, s.TaskQueue)
	}
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var runID, wfID string
	for wfID == "" {
		if time.Now().After(deadline) {
			t.Fatal("the triggered run did not start")
		}
		time.Sleep(200 * time.Millisecond)
		if d, err := h.Describe(ctx); err == nil && len(d.Info.RecentActions) > 0 {
			ex := d.Info.RecentActions[0].StartWorkflowResult
			wfID, runID = ex.WorkflowID, ex.FirstExecutionRunID
		}
	}
	var res activities.AuditResult
	if err := s.Client.GetWorkflow(ctx, wfID, runID).Get(ctx, &res); err != nil {
		t.Fatalf("audit run %s: %v", wfID, err)
	}
	if res.Found != 1 || res.ByKind[string(store.FindingMoneyWithoutRecord)] != 1 || !res.Complete {
		t.Fatalf("audit run: %+v; want one money_without_record, complete", res)
	}
	fs, err := s.Store.Findings(ctx, store.FindingFilter{})
	if err != nil || len(fs) != 1 {
		t.Fatalf("findings %+v, %v", fs, err)
	}
	if cp, ok, err := s.Store.AuditCheckpointOf(ctx, workflows.AuditCheckpoint); err != nil || !ok || time.Since(cp.AuditedUntil) > time.Minute {
		t.Errorf("checkpoint %+v %v %v: want it near now", cp, ok, err)
	}
}
