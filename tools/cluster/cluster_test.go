package cluster

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

func echo(_ workflow.Context, s string) (string, error) { return s, nil }

// TestClusterRunsAWorkflowAndSurvivesAKilledHistory: a split cluster on
// fresh databases serves its namespace with the configured retention and
// runs a workflow; with the history service killed, a start fails; once
// history is back the same workflow ID completes, served from Postgres.
func TestClusterRunsAWorkflowAndSurvivesAKilledHistory(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, Options{Dir: t.TempDir(), Split: true, Fresh: true, Database: "temporal_clustertest", Namespace: "ns-test", Retention: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	tc, err := client.Dial(client.Options{HostPort: c.Address(), Namespace: c.Namespace()})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	d, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "ns-test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 48*time.Hour {
		t.Errorf("retention %s, want 48h", got)
	}
	w := worker.New(tc, "q", worker.Options{})
	w.RegisterWorkflowWithOptions(echo, workflow.RegisterOptions{Name: "echo"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run := func(id string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		r, err := tc.ExecuteWorkflow(cctx, client.StartWorkflowOptions{ID: id, TaskQueue: "q"}, "echo", id)
		if err != nil {
			return "", err
		}
		var out string
		return out, r.Get(cctx, &out)
	}
	if out, err := run("first"); err != nil || out != "first" {
		t.Fatalf("first workflow: %q, %v", out, err)
	}
	if len(c.Pids()) != 4 {
		t.Fatalf("processes %v, want the four services", c.Pids())
	}
	if err := c.Kill("history"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = tc.ExecuteWorkflow(sctx, client.StartWorkflowOptions{ID: "second", TaskQueue: "q"}, "echo", "second")
	cancel()
	if err == nil {
		t.Fatal("a start succeeded with history killed")
	}
	if err := c.Restart("history"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("second"); err != nil || out != "second" {
		t.Fatalf("after the restart: %q, %v", out, err)
	}
}
