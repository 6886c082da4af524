package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/tools/testenv"
)

// TestShutdownWithinDrainTimeout: EFFECTIVELY_DRAIN_TIMEOUT covers the
// whole shutdown (three quarters for the effects, the last quarter for the
// Temporal workers' stop). serve runs one worker per route besides the main
// one, each with WorkerStopTimeout = the quarter; with an effect that
// outlives the drain on each queue (a provider that hangs), each Stop waits
// its full quarter. They stop at once, and shutdown returns at the drain
// timeout whatever is still stopping (it took 3/4 D + n·1/4 D when they
// stopped one after the other).
func TestShutdownWithinDrainTimeout(t *testing.T) {
	t.Run("activities", func(t *testing.T) { shutdownWithStuckEffects(t, false) })
	t.Run("activities+local", func(t *testing.T) { shutdownWithStuckEffects(t, true) })
}

func shutdownWithStuckEffects(t *testing.T, withLocal bool) {
	srv := testenv.StartTemporal(t)
	tc := srv.Client()
	drain := &activities.Drainer{}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	// An effect whose provider call hangs: it runs on the effect context
	// (effect.Begin), which a worker stop does not cancel.
	stuck := func(ctx context.Context) error {
		_, end, err := effect.Begin(ctx, drain)
		if err != nil {
			return err
		}
		defer end()
		activity.GetLogger(ctx).Info("stuck effect running")
		select {
		case <-release:
		case <-time.After(60 * time.Second):
		}
		return nil
	}
	wf := func(ctx workflow.Context, queue string) error {
		if queue == "local" {
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
			return workflow.ExecuteLocalActivity(lctx, stuck).Get(ctx, nil)
		}
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: queue, StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		return workflow.ExecuteActivity(ctx, "Stuck").Get(ctx, nil)
	}

	cfg := config.Config{DrainTimeout: 4 * time.Second}
	effectsTimeout, stopTimeout := cfg.ShutdownTimeouts() // 3s, 1s
	const queue = "shutdown-bound"
	queues := []string{queue, queue + "-effects-order-placed", queue + "-effects-order-refund"}
	var workers []worker.Worker
	for i, q := range queues {
		w := worker.New(tc, q, worker.Options{WorkerStopTimeout: stopTimeout, DisableWorkflowWorker: i > 0})
		if i == 0 {
			w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "StuckWF"})
		}
		w.RegisterActivityWithOptions(stuck, activity.RegisterOptions{Name: "Stuck"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}
	defer stopWorkers(workers)
	effects := len(queues)
	if withLocal {
		effects++
		if _, err := tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: "stuck-local", TaskQueue: queue}, "StuckWF", "local"); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range queues {
		if _, err := tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: "stuck-" + string(rune('a'+i)), TaskQueue: queue}, "StuckWF", q); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for drain.InFlight() < effects {
		if time.Now().After(deadline) {
			t.Fatalf("only %d effects in flight", drain.InFlight())
		}
		time.Sleep(50 * time.Millisecond)
	}

	start := time.Now()
	shutdown(workers, drain, start.Add(cfg.DrainTimeout), stopTimeout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	took := time.Since(start)
	t.Logf("EFFECTIVELY_DRAIN_TIMEOUT=%s (effects %s, worker stop %s), %d workers: shutdown took %s",
		cfg.DrainTimeout, effectsTimeout, stopTimeout, len(workers), took.Round(10*time.Millisecond))
	if took > cfg.DrainTimeout+500*time.Millisecond {
		t.Errorf("shutdown took %s, past EFFECTIVELY_DRAIN_TIMEOUT=%s: each worker's Stop waited its own quarter, one after the other",
			took.Round(10*time.Millisecond), cfg.DrainTimeout)
	}
	if took < effectsTimeout {
		t.Errorf("shutdown took %s: the effects in flight were not given their %s", took.Round(10*time.Millisecond), effectsTimeout)
	}
}
