package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
)

// pendingRefund mocks a refund Stripe answers pending, and CheckRefund with
// check; it returns how many receipts were sent.
func pendingRefund(t *testing.T, cfg Config, check func(n int) (activities.RefundResult, error)) (run func() (RefundStatus, error), receipts *int, checks *int) {
	t.Helper()
	env, wfs := newEnvWith(t, cfg)
	var rec attempts
	receipts, checks = new(int), new(int)
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundPending, RefundID: "re_p", Currency: "usd", Status: "pending"}, nil
	})
	var a *activities.Activities
	env.OnActivity(a.CheckRefund, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.CheckRefundInput) (activities.RefundResult, error) {
		*checks++
		if in.MessageID != "evt_rp" || in.OrderID != 42 {
			t.Errorf("check input = %+v", in)
		}
		return check(*checks)
	})
	onRefundReceipt(env, &rec, func(in activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		*receipts++
		if in.RefundID != "re_p" {
			t.Errorf("receipt input = %+v", in)
		}
		return activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_p"}, nil
	})
	run = func() (RefundStatus, error) {
		env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rp", 500))
		var st RefundStatus
		if err := env.GetWorkflowError(); err != nil {
			return st, err
		}
		return st, env.GetWorkflowResult(&st)
	}
	return run, receipts, checks
}

// TestOrderRefundPendingSendsItsReceiptOnceRefunded: a refund Stripe
// answered pending sends no receipt while CheckRefund finds it pending, and
// one once it finds it refunded.
func TestOrderRefundPendingSendsItsReceiptOnceRefunded(t *testing.T) {
	run, receipts, checks := pendingRefund(t, DefaultConfig(), func(n int) (activities.RefundResult, error) {
		if n < 3 {
			return activities.RefundResult{Outcome: activities.RefundPending, RefundID: "re_p", Status: "pending"}, nil
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_p", Currency: "usd", Status: "succeeded"}, nil
	})
	st, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeRefunded || st.Refund.Outcome != activities.RefundRefunded || *receipts != 1 || *checks != 3 {
		t.Errorf("status %+v, receipts %d, checks %d; want refunded, one receipt after 3 checks", st, *receipts, *checks)
	}
}

// TestOrderRefundPendingThenFailedSendsNoReceipt: a pending refund Stripe
// then fails ends refund_failed, with no receipt.
func TestOrderRefundPendingThenFailedSendsNoReceipt(t *testing.T) {
	run, receipts, _ := pendingRefund(t, DefaultConfig(), func(int) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundFailed, RefundID: "re_p", FailureCode: "refund_declined"}, nil
	})
	st, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeRefundFailed || *receipts != 0 {
		t.Errorf("status %+v, receipts %d; want refund_failed and none", st, *receipts)
	}
}

// TestOrderRefundPendingGivesUp: a refund still pending after
// RefundPendingMaxWait fails the workflow for an operator, with no receipt;
// the checks back off, so a long wait stays a short history.
func TestOrderRefundPendingGivesUp(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RefundPendingMaxWait = 24 * time.Hour
	run, receipts, checks := pendingRefund(t, cfg, func(int) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundPending, RefundID: "re_p", Status: "pending"}, nil
	})
	_, err := run()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrTypeRefundPendingTimeout {
		t.Fatalf("error = %v; want %s", err, ErrTypeRefundPendingTimeout)
	}
	// 1 s doubling to an hour: 12 checks to reach the cap, then one an hour.
	if *receipts != 0 || *checks < 20 || *checks > 40 {
		t.Errorf("receipts %d, checks %d; want none, and 20–40 checks in a day", *receipts, *checks)
	}
}

// TestOrderRefundPendingWokenBySignal: RefundSettledSignal (the webhook's)
// ends the wait at once, not at the next poll.
func TestOrderRefundPendingWokenBySignal(t *testing.T) {
	env, wfs := newEnv(t)
	var rec attempts
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundPending, RefundID: "re_p", Currency: "usd", Status: "pending"}, nil
	})
	settled := false
	var a *activities.Activities
	var checkedAt []time.Time
	env.OnActivity(a.CheckRefund, mock.Anything, mock.Anything).Return(func(context.Context, activities.CheckRefundInput) (activities.RefundResult, error) {
		checkedAt = append(checkedAt, env.Now())
		if settled {
			return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_p", Currency: "usd"}, nil
		}
		return activities.RefundResult{Outcome: activities.RefundPending, RefundID: "re_p"}, nil
	})
	onRefundReceipt(env, &rec, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	start := env.Now()
	// Past the poll's cap: the timers are an hour apart by then.
	env.RegisterDelayedCallback(func() {
		settled = true
		env.SignalWorkflow(RefundSettledSignal, RefundSettled{RefundID: "re_p", Status: "succeeded"})
	}, 5*time.Hour+10*time.Minute)
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rp", 500))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	last := checkedAt[len(checkedAt)-1].Sub(start)
	if st.Outcome != OutcomeRefunded || last > 5*time.Hour+11*time.Minute {
		t.Errorf("outcome %s, last check %s after the start; want refunded, checked as the signal came (5h10m)", st.Outcome, last)
	}
}
