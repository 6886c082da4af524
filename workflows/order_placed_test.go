package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/message"
)

func input(id string) OrderPlacedInput {
	return OrderPlacedInput{Consumer: "order-placed", MessageID: id, Order: message.OrderPlaced{
		OrderID: 42, Amount: 1999, Currency: "usd", CustomerEmail: "ada@example.com", PaymentMethod: "pm_card_visa",
	}}
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *Workflows) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	wfs, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	wfs.Register(env)
	env.RegisterActivity(&activities.Activities{})
	return env, wfs
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) Status {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var st Status
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestPaidThenReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	env.OnActivity(a.ChargeOrder, mock.Anything, activities.ChargeInput{
		Consumer: "order-placed", MessageID: "evt_1", OrderID: 42, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
	}).Return(activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_1"}, nil).Once()
	env.OnActivity(a.SendReceipt, mock.Anything, mock.MatchedBy(func(in activities.ReceiptInput) bool {
		return in.To == "ada@example.com" && in.PaymentIntentID == "pi_1" && in.MessageID == "evt_1"
	})).Return(activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_1"}, nil).Once()

	env.ExecuteWorkflow(OrderPlacedName, input("evt_1"))
	st := result(t, env)
	if st.Outcome != OutcomeCompleted || st.Stage != StageCompleted || st.Receipt.ProviderMessageID != "sg_1" {
		t.Fatalf("status = %+v", st)
	}
	env.AssertExpectations(t)
}

func TestDeclinedSendsNoReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).
		Return(activities.ChargeResult{Outcome: activities.PaymentDeclined, FailureCode: "card_declined", DeclineCode: "generic_decline"}, nil)
	env.OnActivity(a.SendReceipt, mock.Anything, mock.Anything).Return(activities.ReceiptResult{}, nil).Times(0)

	env.ExecuteWorkflow(OrderPlacedName, input("evt_d"))
	st := result(t, env)
	if st.Outcome != OutcomePaymentFailed || st.Receipt != nil {
		t.Fatalf("status = %+v", st)
	}
	env.AssertNotCalled(t, "SendReceipt", mock.Anything, mock.Anything)
}

func TestBusinessDuplicateChargesNothingMore(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).
		Return(activities.ChargeResult{Outcome: activities.PaymentBusinessDuplicate, HeldBy: "evt_1"}, nil)
	env.ExecuteWorkflow(OrderPlacedName, input("evt_2"))
	st := result(t, env)
	if st.Outcome != OutcomeBusinessDuplicate || st.Payment.HeldBy != "evt_1" {
		t.Fatalf("status = %+v", st)
	}
	env.AssertNotCalled(t, "SendReceipt", mock.Anything, mock.Anything)
}

func TestTransientErrorsAreRetried(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	calls := 0
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ activities.ChargeInput) (activities.ChargeResult, error) {
			calls++
			if calls < 3 {
				return activities.ChargeResult{}, errors.New("stripe: 503")
			}
			return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_3"}, nil
		})
	env.OnActivity(a.SendReceipt, mock.Anything, mock.Anything).Return(activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil)
	env.ExecuteWorkflow(OrderPlacedName, input("evt_r"))
	st := result(t, env)
	if calls != 3 || st.Outcome != OutcomeCompleted {
		t.Fatalf("calls = %d, status = %+v", calls, st)
	}
}

func TestNonRetryableErrorFailsWorkflow(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	calls := 0
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ activities.ChargeInput) (activities.ChargeResult, error) {
			calls++
			return activities.ChargeResult{}, temporal.NewNonRetryableApplicationError("mismatch", activities.ErrTypeIdempotencyMismatch, nil)
		})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_x"))
	err := env.GetWorkflowError()
	if !hasType(err, activities.ErrTypeIdempotencyMismatch) || calls != 1 {
		t.Fatalf("err = %v, calls = %d", err, calls)
	}
}

func TestStatusQueryWhileSendingReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var a *activities.Activities
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).Return(activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_q"}, nil)
	env.OnActivity(a.SendReceipt, mock.Anything, mock.Anything).After(time.Minute).Return(activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil)
	var mid Status
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(StatusQuery)
		if err != nil {
			t.Error(err)
			return
		}
		if err := v.Get(&mid); err != nil {
			t.Error(err)
		}
	}, 30*time.Second)
	env.ExecuteWorkflow(OrderPlacedName, input("evt_q"))
	result(t, env)
	if mid.Stage != StageSendingReceipt || mid.Payment == nil || mid.Payment.PaymentIntentID != "pi_q" {
		t.Fatalf("mid-flight status = %+v", mid)
	}
}

func TestConfigRefusesKeyWindow(t *testing.T) {
	c := DefaultConfig()
	c.PaymentScheduleToClose = 24 * time.Hour
	if _, err := New(c); err == nil {
		t.Fatal("a payment schedule-to-close of 24h was accepted")
	}
	c.PaymentScheduleToClose = 23 * time.Hour
	if _, err := New(c); err != nil {
		t.Fatalf("23h refused: %v", err)
	}
}

// hasType reports whether any application error in err's chain has type typ.
func hasType(err error, typ string) bool {
	for err != nil {
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) {
			return false
		}
		if appErr.Type() == typ {
			return true
		}
		err = appErr.Unwrap()
	}
	return false
}
