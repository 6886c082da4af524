package workflows

import (
	"context"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/audit"
)

// TestAuditProvidersRunsTheAuditOnce: the scheduled workflow runs AuditLedger
// once, from the schedule's checkpoint, and returns its result.
func TestAuditProvidersRunsTheAuditOnce(t *testing.T) {
	env, _ := newEnv(t)
	calls := 0
	env.OnActivity(activities.AuditLedgerName, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.AuditInput) (activities.AuditResult, error) {
		calls++
		if in.Checkpoint != AuditCheckpoint {
			t.Errorf("checkpoint %q, want %q", in.Checkpoint, AuditCheckpoint)
		}
		return activities.AuditResult{Report: audit.Report{Found: 2, Complete: true}, ByKind: map[string]int{"duplicate_charge": 2}}, nil
	})
	env.ExecuteWorkflow(AuditProvidersName, activities.AuditInput{})
	var res activities.AuditResult
	if err := env.GetWorkflowResult(&res); err != nil || calls != 1 || res.Found != 2 || res.ByKind["duplicate_charge"] != 2 {
		t.Fatalf("result %+v, %v after %d calls; want the activity's, once", res, err, calls)
	}
}
