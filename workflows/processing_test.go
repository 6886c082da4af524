package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/effectively/effectively/activities"
)

// A processing payment: the workflow waits (signal, or timer and retrieve)
// and sends the receipt only once the payment succeeded.

func processing(activities.ChargeInput) (activities.ChargeResult, error) {
	return activities.ChargeResult{Outcome: activities.PaymentProcessing, PaymentIntentID: "pi_p"}, nil
}

func TestProcessingSignalSettlesBeforeThePoll(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, processing)
	var a *activities.Activities
	var settles []time.Time
	paid := false
	env.OnActivity(a.SettlePayment, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SettleInput) (activities.ChargeResult, error) {
		settles = append(settles, env.Now())
		if in.MessageID != "evt_sig" || in.OrderID != 42 {
			t.Errorf("settle input = %+v", in)
		}
		if paid {
			return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_p"}, nil
		}
		return activities.ChargeResult{Outcome: activities.PaymentProcessing, PaymentIntentID: "pi_p"}, nil
	})
	receipts := 0
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		receipts++
		if !paid {
			t.Error("receipt sent before the payment succeeded")
		}
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	var mid Status
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(StatusQuery)
		if err == nil {
			_ = v.Get(&mid)
		}
		paid = true // Stripe settled it; the webhook consumer signals
		env.SignalWorkflow(PaymentSettledSignal, PaymentSettled{PaymentIntentID: "pi_p", Status: "succeeded"})
	}, 2*time.Minute)
	start := env.Now()
	env.ExecuteWorkflow(OrderPlacedName, input("evt_sig"))
	st := result(t, env)
	if mid.Stage != StagePaymentProcessing {
		t.Errorf("stage while waiting = %q, want %q", mid.Stage, StagePaymentProcessing)
	}
	if st.Outcome != OutcomeCompleted || receipts != 1 || st.Payment.Outcome != activities.PaymentPaid {
		t.Fatalf("status = %+v, receipts = %d", st, receipts)
	}
	// One settle, at the signal: two minutes in, long before the 10 minute poll.
	if len(settles) != 1 || settles[0].Sub(start) > 3*time.Minute {
		t.Fatalf("settles at %v (start %v); want one, at the signal", settles, start)
	}
}

func TestProcessingTimerRetrievesUntilSettled(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, processing)
	var a *activities.Activities
	var settles []time.Duration
	start := env.Now()
	env.OnActivity(a.SettlePayment, mock.Anything, mock.Anything).Return(func(context.Context, activities.SettleInput) (activities.ChargeResult, error) {
		settles = append(settles, env.Now().Sub(start))
		if len(settles) < 3 {
			return activities.ChargeResult{Outcome: activities.PaymentProcessing}, nil
		}
		return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_p"}, nil
	})
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_timer"))
	st := result(t, env)
	if st.Outcome != OutcomeCompleted || len(settles) != 3 {
		t.Fatalf("status = %+v, settles = %v", st, settles)
	}
	for i, d := range settles {
		if want := time.Duration(i+1) * DefaultConfig().PaymentProcessingPoll; d < want {
			t.Fatalf("settle %d at %s, before the poll timer (%s)", i, d, want)
		}
	}
}

func TestProcessingThatFailsSendsNoReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, processing)
	var a *activities.Activities
	env.OnActivity(a.SettlePayment, mock.Anything, mock.Anything).Return(activities.ChargeResult{Outcome: activities.PaymentFailed, FailureCode: "card_declined"}, nil)
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		t.Error("receipt sent for a failed payment")
		return activities.ReceiptResult{}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_pf"))
	st := result(t, env)
	if st.Outcome != OutcomePaymentFailed || st.Receipt != nil || rec.String() != "payment:local" {
		t.Fatalf("status = %+v, attempts = %s", st, &rec)
	}
}

func TestProcessingTimesOutWithoutReceipt(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PaymentProcessingPoll = time.Hour
	cfg.PaymentProcessingMaxWait = 3 * time.Hour
	env, _ := newEnvWith(t, cfg)
	var rec attempts
	onCharge(env, &rec, processing)
	var a *activities.Activities
	settles := 0
	env.OnActivity(a.SettlePayment, mock.Anything, mock.Anything).Return(func(context.Context, activities.SettleInput) (activities.ChargeResult, error) {
		settles++
		return activities.ChargeResult{Outcome: activities.PaymentProcessing}, nil
	})
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		t.Error("receipt sent for a payment still processing")
		return activities.ReceiptResult{}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_pt"))
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not end")
	}
	if err := env.GetWorkflowError(); !hasType(err, ErrTypePaymentProcessingTimeout) {
		t.Fatalf("err = %v, want %s", err, ErrTypePaymentProcessingTimeout)
	}
	if settles != 3 {
		t.Fatalf("settles = %d, want 3 (one per poll within the max wait)", settles)
	}
}
