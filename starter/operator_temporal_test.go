package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// These tests run the commands against a real Temporal dev server, a worker
// and the simulators: resolve signals a workflow waiting for a processing
// payment, and redrive re-runs a failed one only when no charge may exist.

func operatorStack(t *testing.T) *testenv.Stack {
	t.Helper()
	return operatorStackWith(t, testenv.StackOptions{})
}

// operatorStackWith is operatorStack with o; its Workflows are set here.
func operatorStackWith(t *testing.T, o testenv.StackOptions) *testenv.Stack {
	t.Helper()
	// A poll longer than the test: only a signal ends the wait.
	o.Workflows = workflows.Config{PaymentProcessingPoll: time.Hour, PaymentProcessingMaxWait: 2 * time.Hour}
	s := testenv.NewStack(t, o)
	t.Setenv("DATABASE_URL", s.DBURL)
	t.Setenv("TEMPORAL_ADDRESS", s.Temporal.FrontendHostPort())
	t.Setenv("EFFECTIVELY_TASK_QUEUE", s.TaskQueue)
	t.Setenv("STRIPE_API_KEY", "sk_test_ops")
	t.Setenv("STRIPE_BASE_URL", s.Sims.StripeURL)
	return s
}

func placeOrder(t *testing.T, s *testenv.Stack, id string, order int64, pm string) {
	t.Helper()
	raw := fmt.Sprintf(`{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":%q}}`, id, order, pm)
	if _, err := s.Intake.Accept(context.Background(), []byte(raw), "test"); err != nil {
		t.Fatal(err)
	}
}

// waitPayment waits until the message's payment is in state.
func waitPayment(t *testing.T, s *testenv.Stack, id string, state store.PaymentState) store.Payment {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := s.Store.PaymentOf(context.Background(), "order-placed", id)
		if err == nil && p.State == state {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment of %s = %+v, %v; want %s", id, p, err, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func workflowResult(t *testing.T, s *testenv.Stack, id string) (workflows.Status, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st workflows.Status
	err := s.Client.GetWorkflow(ctx, "order-placed/"+id, "").Get(ctx, &st)
	return st, err
}

func TestResolveSignalsTheWaitingWorkflow(t *testing.T) {
	s := operatorStack(t)
	placeOrder(t, s, "evt_sig", 70, "pm_card_processing")
	p := waitPayment(t, s, "evt_sig", store.PaymentProcessing)
	if err := s.Sims.Stripe.SettleProcessing(p.PaymentIntentID, true); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runStarter(t, "resolve", "evt_sig")
	var rep resolveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || rep.Workflow == nil || !rep.Workflow.Signalled {
		t.Fatalf("resolve: exit %d, %s %s", code, out, stderr)
	}
	st, err := workflowResult(t, s, "evt_sig")
	if err != nil || st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("workflow = %+v, %v", st, err)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["email:evt_sig"]; n != 1 {
		t.Fatalf("receipts = %d, want 1", n)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_sig"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestRedriveOnlyWhenNoChargeMayExist(t *testing.T) {
	s := operatorStack(t)
	ctx := context.Background()
	placeOrder(t, s, "evt_rd", 71, "pm_card_processing")
	p := waitPayment(t, s, "evt_rd", store.PaymentProcessing)

	// Running, and a charge may exist: refused.
	if code, _, stderr := runStarter(t, "redrive", "evt_rd"); code != exitRefused || !strings.Contains(stderr, "resolve") {
		t.Fatalf("redrive while processing: exit %d, %s", code, stderr)
	}
	if err := s.Client.TerminateWorkflow(ctx, "order-placed/evt_rd", "", "test: an operator stopped it"); err != nil {
		t.Fatal(err)
	}
	// Terminated, but the payment is still processing: still refused.
	if code, _, _ := runStarter(t, "redrive", "evt_rd"); code != exitRefused {
		t.Fatalf("redrive of a terminated run with a processing payment: exit %d", code)
	}
	// Stripe settles; resolve records it (the run is closed: record only).
	if err := s.Sims.Stripe.SettleProcessing(p.PaymentIntentID, true); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runStarter(t, "resolve", "evt_rd")
	if code != exitOK || !strings.Contains(out, "redrive") || strings.Contains(out, `"signalled": true`) {
		t.Fatalf("resolve: exit %d, %s %s", code, out, stderr)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["email:evt_rd"]; n != 0 {
		t.Fatalf("receipts before the redrive = %d", n)
	}
	// Now redrive: a new run, which sends the receipt without charging.
	code, out, stderr = runStarter(t, "redrive", "evt_rd")
	var rep redriveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK || rep.RunID == "" || rep.PreviousStatus != "Terminated" {
		t.Fatalf("redrive: exit %d, %s %s", code, out, stderr)
	}
	st, err := workflowResult(t, s, "evt_rd")
	if err != nil || st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("redriven workflow = %+v, %v", st, err)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["email:evt_rd"]; n != 1 {
		t.Fatalf("receipts = %d, want 1", n)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_rd"]; n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
	// Completed: never run again.
	if code, _, _ := runStarter(t, "redrive", "evt_rd"); code != exitRefused {
		t.Fatalf("redrive of a completed run: exit %d", code)
	}
}

// TestRunMayBeOpenAfterItsClose: a run that has just completed may still
// act for resolve's purposes (an attempt outlives its run until its own
// deadline); a workflow Temporal does not know may not.
func TestRunMayBeOpenAfterItsClose(t *testing.T) {
	s := operatorStack(t)
	placeOrder(t, s, "evt_closed_now", 9101, "pm_card_visa")
	if _, err := workflowResult(t, s, "evt_closed_now"); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !runMayBeOpen(ctx, cfg, "order-placed/evt_closed_now", testenv.Logger(t)) {
		t.Error("a run closed a moment ago: may act = false, want true until its last attempt's deadline has passed")
	}
	if runMayBeOpen(ctx, cfg, "order-placed/evt_never_started", testenv.Logger(t)) {
		t.Error("a workflow Temporal does not know: may act = true, want false")
	}
}
