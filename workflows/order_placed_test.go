package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
)

func input(id string) OrderPlacedInput {
	return OrderPlacedInput{Consumer: "order-placed", MessageID: id, Order: message.OrderPlaced{
		OrderID: 42, Amount: 1999, Currency: "usd", CustomerEmail: "ada@example.com", PaymentMethod: "pm_card_visa",
	}}
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *Workflows) {
	t.Helper()
	return newEnvWith(t, DefaultConfig())
}

func newEnvWith(t *testing.T, cfg Config) (*testsuite.TestWorkflowEnvironment, *Workflows) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	wfs, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wfs.Register(env)
	activities.Register(env, &activities.Activities{})
	return env, wfs
}

// attempts records which kind of activity ran an effect, in order.
type attempts struct{ kinds []string }

func (r *attempts) note(ctx context.Context, effect string) {
	if r == nil {
		return
	}
	kind := "regular"
	if activity.GetInfo(ctx).IsLocalActivity {
		kind = "local"
	}
	r.kinds = append(r.kinds, effect+":"+kind)
}

func (r *attempts) String() string { return strings.Join(r.kinds, " ") }

// onEffect mocks an effect's regular activity and its local form, as the
// worker runs them (the local one returns the error as data), with fn;
// rec, when not nil, notes each attempt's kind under name.
func onEffect[In, Out, L any](env *testsuite.TestWorkflowEnvironment, rec *attempts, name string,
	regular func(context.Context, In) (Out, error), local func(context.Context, In) (L, error),
	asLocal func(Out, *activities.AttemptError) L, fn func(In) (Out, error),
) {
	env.OnActivity(regular, mock.Anything, mock.Anything).Return(func(ctx context.Context, in In) (Out, error) {
		rec.note(ctx, name)
		return fn(in)
	})
	env.OnActivity(local, mock.Anything, mock.Anything).Return(func(ctx context.Context, in In) (L, error) {
		rec.note(ctx, name)
		r, err := fn(in)
		return asLocal(r, activities.ErrorAsData(err)), nil
	})
}

// onCharge mocks ChargeOrder and ChargeOrderLocally with fn.
func onCharge(env *testsuite.TestWorkflowEnvironment, rec *attempts, fn func(activities.ChargeInput) (activities.ChargeResult, error)) {
	var a *activities.Activities
	onEffect(env, rec, "payment", a.ChargeOrder, a.ChargeOrderLocally, func(r activities.ChargeResult, e *activities.AttemptError) activities.LocalCharge {
		return activities.LocalCharge{Result: r, Err: e}
	}, fn)
}

// localReceipt is a receipt's local outcome.
func localReceipt(r activities.ReceiptResult, e *activities.AttemptError) activities.LocalReceipt {
	return activities.LocalReceipt{Result: r, Err: e}
}

// onReceipt mocks SendReceipt and SendReceiptLocally with fn.
func onReceipt(env *testsuite.TestWorkflowEnvironment, rec *attempts, fn func(activities.ReceiptInput) (activities.ReceiptResult, error)) {
	var a *activities.Activities
	onEffect(env, rec, "receipt", a.SendReceipt, a.SendReceiptLocally, localReceipt, fn)
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
	var rec attempts
	onCharge(env, &rec, func(in activities.ChargeInput) (activities.ChargeResult, error) {
		if want := (activities.ChargeInput{Consumer: "order-placed", MessageID: "evt_1", OrderID: 42, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa", ReceiptTo: "ada@example.com", ReceiptBudget: DefaultConfig().LocalStartToClose}); in != want {
			t.Errorf("charge input = %+v, want %+v", in, want)
		}
		return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_1"}, nil
	})
	onReceipt(env, &rec, func(in activities.ReceiptInput) (activities.ReceiptResult, error) {
		if in.To != "ada@example.com" || in.PaymentIntentID != "pi_1" || in.MessageID != "evt_1" {
			t.Errorf("receipt input = %+v", in)
		}
		return activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_1"}, nil
	})

	env.ExecuteWorkflow(OrderPlacedName, input("evt_1"))
	st := result(t, env)
	if st.Outcome != OutcomeCompleted || st.Stage != StageCompleted || st.Receipt.ProviderMessageID != "sg_1" {
		t.Fatalf("status = %+v", st)
	}
	// Both effects ran once, locally: no regular activity, no fallback.
	if want := "payment:local receipt:local"; rec.String() != want || len(st.Fallbacks) != 0 {
		t.Fatalf("attempts = %s (want %s), fallbacks = %v", &rec, want, st.Fallbacks)
	}
}

// TestIntakeClaimOnlyInTheFirstTask: the intake's claim reaches the local
// charge scheduled by the workflow's first task, and not one scheduled by
// a task that follows a failed or timed-out one (a later history length).
func TestIntakeClaimOnlyInTheFirstTask(t *testing.T) {
	claim := &message.Claim{Token: 1, At: time.Unix(1_800_000_000, 0).UTC()}
	for length, want := range map[int]*message.Claim{3: claim, 6: nil} {
		env, _ := newEnv(t)
		env.SetCurrentHistoryLength(length)
		var rec attempts
		var got *message.Claim
		onCharge(env, &rec, func(in activities.ChargeInput) (activities.ChargeResult, error) {
			got = in.Claim
			return activities.ChargeResult{Outcome: activities.PaymentFailed, FailureCode: "card_declined"}, nil
		})
		in := input("evt_claim")
		in.Claim = claim
		env.ExecuteWorkflow(OrderPlacedName, in)
		result(t, env)
		if got != want && (got == nil || want == nil || *got != *want) {
			t.Errorf("history length %d: the charge's claim = %+v, want %+v", length, got, want)
		}
	}
}

// TestReceiptSentWithTheCharge: a charge that sent the receipt under its
// record's claim returns it; the workflow still runs SendReceipt, in the
// same place (the shape older workers replay), handing it that outcome.
func TestReceiptSentWithTheCharge(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	sent := activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_with_charge"}
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_1", Receipt: &sent}, nil
	})
	onReceipt(env, &rec, func(in activities.ReceiptInput) (activities.ReceiptResult, error) {
		if in.Sent == nil || *in.Sent != sent {
			t.Errorf("receipt input = %+v, want the charge's outcome in Sent", in)
			return activities.ReceiptResult{}, nil
		}
		return *in.Sent, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_with_charge"))
	st := result(t, env)
	if st.Outcome != OutcomeCompleted || st.Receipt == nil || *st.Receipt != sent {
		t.Fatalf("status = %+v", st)
	}
	if want := "payment:local receipt:local"; rec.String() != want {
		t.Fatalf("attempts = %s, want %s", &rec, want)
	}
}

func TestDeclinedSendsNoReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		return activities.ChargeResult{Outcome: activities.PaymentFailed, FailureCode: "card_declined", DeclineCode: "generic_decline"}, nil
	})
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{}, nil
	})

	env.ExecuteWorkflow(OrderPlacedName, input("evt_d"))
	st := result(t, env)
	if st.Outcome != OutcomePaymentFailed || st.Receipt != nil || rec.String() != "payment:local" {
		t.Fatalf("status = %+v, attempts = %s", st, &rec)
	}
}

func TestBusinessDuplicateChargesNothingMore(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		return activities.ChargeResult{Outcome: activities.PaymentBusinessDuplicate, HeldBy: "evt_1"}, nil
	})
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_2"))
	st := result(t, env)
	if st.Outcome != OutcomeBusinessDuplicate || st.Payment.HeldBy != "evt_1" || rec.String() != "payment:local" {
		t.Fatalf("status = %+v, attempts = %s", st, &rec)
	}
}

// TestTransientErrorsFallBackToRegularAttempts: the payment's local attempt
// fails with a retryable error, so the same activity runs again as a
// regular activity, with its retry policy, until it succeeds; the receipt's
// local attempt succeeds.
func TestTransientErrorsFallBackToRegularAttempts(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	calls := 0
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		calls++
		if calls < 3 {
			return activities.ChargeResult{}, errors.New("stripe: 503")
		}
		return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_3"}, nil
	})
	onReceipt(env, &rec, func(activities.ReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_r"))
	st := result(t, env)
	if want := "payment:local payment:regular payment:regular receipt:local"; rec.String() != want || st.Outcome != OutcomeCompleted {
		t.Fatalf("attempts = %s (want %s), status = %+v", &rec, want, st)
	}
	if len(st.Fallbacks) != 1 || st.Fallbacks[0] != "payment" {
		t.Fatalf("fallbacks = %v, want [payment]", st.Fallbacks)
	}
}

// TestNonRetryableErrorFailsWorkflow: a non-retryable error of the local
// attempt ends the workflow; no regular attempt follows.
func TestNonRetryableErrorFailsWorkflow(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		return activities.ChargeResult{}, temporal.NewNonRetryableApplicationError("mismatch", activities.ErrTypeIdempotencyMismatch, nil)
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_x"))
	err := env.GetWorkflowError()
	if !hasType(err, activities.ErrTypeIdempotencyMismatch) || rec.String() != "payment:local" {
		t.Fatalf("err = %v, attempts = %s", err, &rec)
	}
}

// TestLocalTimeoutFallsBack: a local attempt that outlives
// LocalStartToClose is abandoned for a regular attempt.
func TestLocalTimeoutFallsBack(t *testing.T) {
	// Local activities run in real time, even in the test environment.
	cfg := DefaultConfig()
	cfg.LocalStartToClose = 4 * time.Second // the shortest Validate allows
	env, _ := newEnvWith(t, cfg)
	env.SetTestTimeout(30 * time.Second)
	var rec attempts
	var a *activities.Activities
	env.OnActivity(a.ChargeOrderLocally, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.ChargeInput) (activities.LocalCharge, error) {
		rec.note(ctx, "payment")
		<-ctx.Done()
		return activities.LocalCharge{}, ctx.Err()
	})
	env.OnActivity(a.ChargeOrder, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.ChargeInput) (activities.ChargeResult, error) {
		rec.note(ctx, "payment")
		return activities.ChargeResult{Outcome: activities.PaymentFailed}, nil
	})
	env.ExecuteWorkflow(OrderPlacedName, input("evt_t"))
	st := result(t, env)
	if rec.String() != "payment:local payment:regular" || st.Outcome != OutcomePaymentFailed || len(st.Fallbacks) != 1 {
		t.Fatalf("attempts = %s, status = %+v", &rec, st)
	}
}

func TestStatusQueryWhileSendingReceipt(t *testing.T) {
	env, _ := newEnv(t)
	var rec attempts
	onCharge(env, &rec, func(activities.ChargeInput) (activities.ChargeResult, error) {
		return activities.ChargeResult{Outcome: activities.PaymentPaid, PaymentIntentID: "pi_q"}, nil
	})
	// The local receipt attempt fails; the regular one takes a minute.
	var a *activities.Activities
	env.OnActivity(a.SendReceiptLocally, mock.Anything, mock.Anything).Return(activities.LocalReceipt{Err: &activities.AttemptError{Message: "sendgrid: 503"}}, nil)
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
	// The local attempts come first and count against the window.
	c.PaymentScheduleToClose = 23 * time.Hour
	if _, err := New(c); err == nil {
		t.Fatal("23h of regular attempts after a local one of 10s was accepted")
	}
	// The charge's local attempt may take twice LocalStartToClose: its
	// charge, then the receipt it sends (receiptLocalOptions).
	c.PaymentScheduleToClose = 23*time.Hour - c.LocalStartToClose
	if _, err := New(c); err == nil {
		t.Fatal("23h less one LocalStartToClose was accepted: the charge's local attempt takes up to two")
	}
	c.PaymentScheduleToClose = 23*time.Hour - 2*c.LocalStartToClose
	if _, err := New(c); err != nil {
		t.Fatalf("23h less the local attempt refused: %v", err)
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
