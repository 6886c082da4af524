package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// pruneWorker polls its own task queue with the real workflows and an
// Activities whose retention is policy.
func pruneWorker(t *testing.T, s *testenv.Stack, queue string, policy retention.Policy) {
	t.Helper()
	w := worker.New(s.Client, queue, worker.Options{})
	wfs, err := workflows.New(workflows.Config{})
	if err != nil {
		t.Fatal(err)
	}
	wfs.Register(w)
	activities.Register(w, &activities.Activities{Store: s.Store, Retention: policy.Prune()})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
}

// hasErrorType reports whether err's chain holds an application error of
// type typ.
func hasErrorType(err error, typ string) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == typ {
			return true
		}
	}
	return false
}

// TestPruneKeepsEverythingYoungerThanTheHorizon computes the horizon from a
// real consumer and the dev server's namespace retention, refuses a shorter
// retention the way the worker's start does, then runs the real schedule
// with retention = horizon over rows on both sides of it.
func TestPruneKeepsEverythingYoungerThanTheHorizon(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	ctx := context.Background()
	cons, err := jetstream.NewConsumer(ctx, s.Intake, j.JS, j.ConsumerConfig(t, 30*time.Second, 4))
	if err != nil {
		t.Fatal(err)
	}
	r, dup, err := cons.Redelivery(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := r.Window(); w != 2*time.Minute || dup != 2*time.Minute {
		t.Fatalf("redelivery window %s, duplicate window %s; want 2m each", w, dup)
	}

	hz, err := cons.Horizon(ctx)
	if err != nil || hz.Total() != 4*time.Minute {
		t.Fatalf("source horizon %+v, %v; want 4m", hz, err)
	}

	// An unsafe retention is refused, naming both numbers.
	_, err = retention.ReadPolicy(ctx, s.Client, "default", time.Hour, hz)
	if err == nil || !strings.Contains(err.Error(), "RETENTION") || !strings.Contains(err.Error(), "1h0m0s") ||
		!strings.Contains(err.Error(), "25h4m0s") { // 2m + 2m + 24h (the dev server's default) + 1h margin
		t.Fatalf("unsafe retention: err = %v", err)
	}
	policy, err := retention.ReadPolicy(ctx, s.Client, "default", 25*time.Hour+4*time.Minute, hz)
	if err != nil {
		t.Fatalf("retention = horizon refused: %v", err)
	}
	h := policy.Horizon.Total

	young, old := h-time.Minute, h+time.Hour
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Store.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for i, age := range []time.Duration{young, old, young, old} {
		at := time.Now().Add(-age)
		id := fmt.Sprintf("evt_age_%d", i)
		exec(`INSERT INTO processed_messages (consumer, message_id, outcome, processed_at) VALUES ('order-placed', $1, 'paid', $2)`, id, at)
		exec(`INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source, state, received_at, dispatched_at)
		      VALUES ('order-placed', $1, '\x7b7d', 'x', 'test', 'dispatched', $2, $2)`, id, at)
		exec(`INSERT INTO outbox (event_id, topic, payload, created_at, published_at) VALUES ($1, 'order.paid', '{}', $2, $2)`, "order.paid:"+id, at)
	}
	// Never pruned, however old: a pending inbox row and an unpublished event.
	ancient := time.Now().Add(-10 * old)
	exec(`INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source, received_at) VALUES ('order-placed', 'evt_pending', '\x7b7d', 'x', 'test', $1)`, ancient)
	exec(`INSERT INTO outbox (event_id, topic, payload, created_at) VALUES ('order.paid:evt_unsent', 'order.paid', '{}', $1)`, ancient)

	// A worker with an unsafe retention refuses to prune anything.
	pruneWorker(t, s, "prune-unsafe", retention.Policy{Keep: time.Hour, Horizon: policy.Horizon})
	run, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "prune-unsafe"}, workflows.PruneRecordsName, activities.PruneInput{})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); !hasErrorType(err, activities.ErrTypeRetentionUnsafe) {
		t.Fatalf("prune with an unsafe retention: err = %v, want %s", err, activities.ErrTypeRetentionUnsafe)
	}
	if n := count(t, s, `SELECT count(*) FROM processed_messages`); n != 4 {
		t.Fatalf("the refused run deleted rows: %d left", n)
	}

	// The schedule, created then updated as every worker start does, with
	// batches of one row to exercise the batching.
	pruneWorker(t, s, "prune-safe", policy)
	cfg := retention.ScheduleConfig{ID: "prune-test", Every: time.Hour, TaskQueue: "prune-safe", BatchSize: 1}
	if _, err := retention.EnsureSchedule(ctx, s.Client, cfg); err != nil {
		t.Fatal(err)
	}
	h2, err := retention.EnsureSchedule(ctx, s.Client, cfg)
	if err != nil {
		t.Fatalf("update the existing schedule: %v", err)
	}
	if err := h2.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		t.Fatal(err)
	}
	var wfID string
	testenv.Eventually(t, 30*time.Second, "the scheduled run to start", func() bool {
		d, err := h2.Describe(ctx)
		if err != nil || len(d.Info.RecentActions) == 0 {
			return false
		}
		wfID = d.Info.RecentActions[0].StartWorkflowResult.WorkflowID
		return true
	})
	var res activities.PruneResult
	if err := s.Client.GetWorkflow(ctx, wfID, "").Get(ctx, &res); err != nil {
		t.Fatalf("scheduled prune: %v", err)
	}
	for table, want := range map[string]int64{"processed_messages": 2, "inbox": 2, "outbox": 2} {
		if res.Deleted[table] != want {
			t.Errorf("deleted from %s = %d, want %d (%+v)", table, res.Deleted[table], want, res)
		}
	}
	for _, q := range []string{
		`SELECT count(*) FROM processed_messages WHERE message_id IN ('evt_age_0', 'evt_age_2')`,
		`SELECT count(*) FROM inbox WHERE message_id IN ('evt_age_0', 'evt_age_2')`,
		`SELECT count(*) FROM outbox WHERE event_id IN ('order.paid:evt_age_0', 'order.paid:evt_age_2')`,
	} {
		if n := count(t, s, q); n != 2 {
			t.Errorf("%s = %d: a row younger than the horizon was pruned", q, n)
		}
	}
	for _, q := range []string{
		`SELECT count(*) FROM processed_messages WHERE message_id IN ('evt_age_1', 'evt_age_3')`,
		`SELECT count(*) FROM inbox WHERE message_id IN ('evt_age_1', 'evt_age_3')`,
	} {
		if n := count(t, s, q); n != 0 {
			t.Errorf("%s = %d: old rows were kept", q, n)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM inbox WHERE message_id = 'evt_pending'`) + count(t, s, `SELECT count(*) FROM outbox WHERE event_id = 'order.paid:evt_unsent'`); n != 2 {
		t.Errorf("a pending inbox row or an unpublished event was pruned")
	}
}
