package webhook_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// awaitSettled stands in for an OrderPlaced workflow waiting on its
// payment: it returns the first PaymentSettled it receives.
func awaitSettled(ctx workflow.Context) (workflows.PaymentSettled, error) {
	var s workflows.PaymentSettled
	workflow.GetSignalChannel(ctx, workflows.PaymentSettledSignal).Receive(ctx, &s)
	return s, nil
}

// Against a real Temporal server: a succeeded event reaches the waiting
// workflow as PaymentSettled; a copy arriving after the workflow closed is
// still answered 200.
func TestStripeSignalsARealWorkflow(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartTemporal(t)
	tc := srv.Client()
	const queue = "webhook-signal-test"
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(awaitSettled, workflow.RegisterOptions{Name: "AwaitSettled"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	e := newEnv(t, webhook.Config{})
	h, err := webhook.New(e.st, tc, e.metrics, webhook.Config{StripeSecrets: []string{secretNew}})
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	e.claim("mt1", 41)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "order-placed/mt1", TaskQueue: queue}, "AwaitSettled")
	if err != nil {
		t.Fatal(err)
	}
	ev := stripeEvent("evt_t1", "payment_intent.succeeded", "pi_t1", "succeeded", "mt1", nil)
	wantStatus(t, e.sendStripe(ev), http.StatusOK)
	getCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got workflows.PaymentSettled
	if err := run.Get(getCtx, &got); err != nil {
		t.Fatal(err)
	}
	if got != (workflows.PaymentSettled{PaymentIntentID: "pi_t1", Status: "succeeded"}) {
		t.Fatalf("workflow received %+v", got)
	}
	// The workflow is closed now: the copy's signal finds nothing to
	// signal, which is not an error.
	wantStatus(t, e.sendStripe(ev), http.StatusOK)
	if e.payment("mt1").State != store.PaymentSucceeded {
		t.Fatal("payment not settled")
	}
	if n := e.count("stripe", "error"); n != 0 {
		t.Fatalf("%d errors counted", n)
	}
}
