package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
)

func refundInput(id string, amount int64) OrderRefundInput {
	return OrderRefundInput{Consumer: "order-refund", MessageID: id, Refund: message.RefundRequested{OrderID: 42, Amount: amount, Reason: "requested_by_customer"}}
}

// onRefund mocks RefundOrder and RefundOrderLocally with fn.
func onRefund(env *testsuite.TestWorkflowEnvironment, rec *attempts, fn func(activities.RefundInput) (activities.RefundResult, error)) {
	var a *activities.Activities
	onEffect(env, rec, "refund", a.RefundOrder, a.RefundOrderLocally, func(r activities.RefundResult, e *activities.AttemptError) activities.LocalRefund {
		return activities.LocalRefund{Result: r, Err: e}
	}, fn)
}

// onRefundReceipt mocks SendRefundReceipt and SendRefundReceiptLocally
// with fn.
func onRefundReceipt(env *testsuite.TestWorkflowEnvironment, rec *attempts, fn func(activities.RefundReceiptInput) (activities.ReceiptResult, error)) {
	var a *activities.Activities
	onEffect(env, rec, "mail", a.SendRefundReceipt, a.SendRefundReceiptLocally, localReceipt, fn)
}

func TestOrderRefundRefundsThenSendsReceipt(t *testing.T) {
	env, wfs := newEnv(t)
	var refunds, receipts int
	var receiptIn activities.RefundReceiptInput
	var rec attempts
	onRefund(env, &rec, func(in activities.RefundInput) (activities.RefundResult, error) {
		refunds++
		if in.Amount != 500 || in.OrderID != 42 || in.Reason != "requested_by_customer" || in.ReceiptBudget != DefaultConfig().LocalStartToClose {
			t.Errorf("refund input = %+v; want the local attempt's, keeping LocalStartToClose for the receipt", in)
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_1", Currency: "usd"}, nil
	})
	onRefundReceipt(env, &rec, func(in activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		receipts++
		receiptIn = in
		return activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_1"}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r1", 500))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeRefunded || st.Stage != StageCompleted || st.Refund.RefundID != "re_1" || st.Receipt.ProviderMessageID != "sg_1" {
		t.Errorf("status = %+v", st)
	}
	if refunds != 1 || receipts != 1 {
		t.Errorf("refunds %d, receipts %d; want 1 each", refunds, receipts)
	}
	// Both ran once, inside the first workflow task: no task queue.
	if want := "refund:local mail:local"; rec.String() != want || len(st.Fallbacks) != 0 {
		t.Errorf("attempts = %s (want %s), fallbacks = %v", &rec, want, st.Fallbacks)
	}
	if receiptIn.RefundID != "re_1" || receiptIn.Currency != "usd" || receiptIn.Amount != 500 {
		t.Errorf("receipt input = %+v", receiptIn)
	}
}

// TestOrderRefundPassesTheReceiptItsRefundSent: a refund receipt the local
// refund sent under its record's claim reaches SendRefundReceipt as Sent,
// which the workflow still schedules (the histories keep their shape), and
// is the workflow's receipt.
func TestOrderRefundPassesTheReceiptItsRefundSent(t *testing.T) {
	env, wfs := newEnv(t)
	sent := &activities.ReceiptResult{Outcome: activities.ReceiptSent, ProviderMessageID: "sg_held"}
	var receiptIn activities.RefundReceiptInput
	var rec attempts
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_1", Currency: "usd", Receipt: sent}, nil
	})
	onRefundReceipt(env, &rec, func(in activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		receiptIn = in
		return *in.Sent, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r_held", 500))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if receiptIn.Sent == nil || *receiptIn.Sent != *sent {
		t.Errorf("receipt input = %+v; want the refund's receipt as Sent", receiptIn)
	}
	if want := "refund:local mail:local"; rec.String() != want {
		t.Errorf("attempts = %s, want %s", &rec, want)
	}
	if st.Outcome != OutcomeRefunded || st.Receipt == nil || st.Receipt.ProviderMessageID != "sg_held" {
		t.Errorf("status = %+v", st)
	}
}

func TestOrderRefundRefusalsSendNoReceipt(t *testing.T) {
	for _, tc := range []struct {
		refund activities.RefundOutcome
		want   Outcome
	}{
		{activities.RefundExceedsPayment, OutcomeRefundExceedsPayment},
		{activities.RefundOrderNotPaid, OutcomeOrderNotPaid},
		{activities.RefundFailed, OutcomeRefundFailed},
	} {
		t.Run(string(tc.refund), func(t *testing.T) {
			env, wfs := newEnv(t)
			onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
				return activities.RefundResult{Outcome: tc.refund}, nil
			})
			onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
				t.Error("a receipt was sent for a refund that did not happen")
				return activities.ReceiptResult{}, nil
			})
			env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r2", 500))
			var st RefundStatus
			if err := env.GetWorkflowResult(&st); err != nil {
				t.Fatal(err)
			}
			if st.Outcome != tc.want || st.Stage != StageCompleted || st.Receipt != nil {
				t.Errorf("status = %+v, want outcome %s", st, tc.want)
			}
		})
	}
}

// TestOrderRefundWaitsForPayment: a refund whose order is still being
// charged is retried until the payment settles, then refunded once.
func TestOrderRefundWaitsForPayment(t *testing.T) {
	env, wfs := newEnv(t)
	calls := 0
	onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
		calls++
		if calls < 3 {
			return activities.RefundResult{}, temporal.NewApplicationError("payment of order 42 is claimed", activities.ErrTypePaymentPending)
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_2", Currency: "usd"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r3", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if calls != 3 || st.Outcome != OutcomeRefunded {
		t.Errorf("calls %d, status %+v", calls, st)
	}
}

func TestOrderRefundStatusQuery(t *testing.T) {
	env, wfs := newEnv(t)
	onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_3"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptFailed, Error: "bounced"}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r4", 100))
	val, err := env.QueryWorkflow(StatusQuery)
	if err != nil {
		t.Fatal(err)
	}
	var st RefundStatus
	if err := val.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeReceiptFailed || st.MessageID != "evt_r4" || st.Amount != 100 {
		t.Errorf("query = %+v", st)
	}
}

// TestOrderRefundWaitsAsLongAsThePaymentMayProcess: a refund whose order's
// payment is still open (processing for days, as bank debits are) keeps
// waiting past the payment activity's 20 h schedule-to-close, then refunds
// once when the payment settles; one whose payment never settles gives up
// only after the payment itself would have (ChargeOrder's 20 h plus
// PAYMENT_PROCESSING_MAX_WAIT).
func TestOrderRefundWaitsAsLongAsThePaymentMayProcess(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name    string
		settles time.Duration // when the payment settles; 0: never
	}{
		{"settles after 30h", 30 * time.Hour},
		{"settles after 90h", 90 * time.Hour},
		{"never settles", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, wfs := newEnv(t)
			start := env.Now()
			refunded := 0
			onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
				if tc.settles == 0 || env.Now().Sub(start) < tc.settles {
					return activities.RefundResult{}, temporal.NewApplicationError("payment of order 42 is processing", activities.ErrTypePaymentPending)
				}
				refunded++
				return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_w", Currency: "usd"}, nil
			})
			onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
				return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
			})
			env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rw", 100))
			var st RefundStatus
			err := env.GetWorkflowResult(&st)
			waited := env.Now().Sub(start)
			if tc.settles != 0 {
				if err != nil || st.Outcome != OutcomeRefunded || refunded != 1 {
					t.Fatalf("after %s: outcome %q, %d refunds, err %v; want refunded once", waited.Round(time.Minute), st.Outcome, refunded, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "processing") {
				t.Fatalf("a payment that never settles: err %v, want the PaymentPending failure", err)
			}
			if least := cfg.PaymentScheduleToClose + cfg.PaymentProcessingMaxWait; waited < least {
				t.Fatalf("gave up after %s, want at least %s", waited.Round(time.Minute), least)
			}
		})
	}
}

// TestOrderRefundWaitBehindItsVersion: a run that took the old code's path
// (GetVersion answers DefaultVersion, as when a history recorded before the
// change replays) fails after its first RefundOrder run, as that code did.
func TestOrderRefundWaitBehindItsVersion(t *testing.T) {
	env, wfs := newEnv(t)
	env.OnGetVersion(refundWaitChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	// Its local attempt came before refundPendingChange too (a history
	// with refundWaitChange unmarked has no later marker).
	env.OnGetVersion(refundPendingChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	var rec attempts
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{}, temporal.NewApplicationError("payment of order 42 is processing", activities.ErrTypePaymentPending)
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rv", 100))
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "processing") {
		t.Fatalf("err %v, want the PaymentPending failure of the first run", err)
	}
	// The local attempt, then one regular run: the test environment's 10
	// attempts.
	if want := "refund:local" + strings.Repeat(" refund:regular", 10); rec.String() != want {
		t.Fatalf("attempts %s, want %s", &rec, want)
	}
}

// TestOrderRefundBeforeLocalAttempts: a run of a release before the local
// attempts (GetVersion answers DefaultVersion, as its history replays)
// runs the refund and its receipt as regular activities only, as that
// release did.
func TestOrderRefundBeforeLocalAttempts(t *testing.T) {
	env, wfs := newEnv(t)
	env.OnGetVersion(refundLocalChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	var rec attempts
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_o", Currency: "usd"}, nil
	})
	onRefundReceipt(env, &rec, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_ro", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if want := "refund:regular mail:regular"; rec.String() != want || st.Outcome != OutcomeRefunded {
		t.Fatalf("attempts %s (want %s), outcome %s", &rec, want, st.Outcome)
	}
}

// TestOrderRefundFallsBack: a local attempt that fails in a way a retry
// could cure (Stripe down, the rate limit's line too long for a local
// wait) goes on as the regular activity, noted in Fallbacks; one that
// fails for good (the same key with another request) ends the workflow
// without a regular attempt.
func TestOrderRefundFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		local     error
		attempts  string
		fallbacks int
		fails     bool
	}{
		{"stripe down", errors.New("stripe: 503"), "refund:local refund:regular mail:local", 1, false},
		{"rate limited", temporal.NewApplicationError("waiting for the provider's rate limit", activities.ErrTypeRateLimited), "refund:local refund:regular mail:local", 1, false},
		{"key mismatch", temporal.NewNonRetryableApplicationError("same key, different parameters", activities.ErrTypeIdempotencyMismatch, nil), "refund:local", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, wfs := newEnv(t)
			var rec attempts
			onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
				if len(rec.kinds) == 1 {
					return activities.RefundResult{}, tc.local
				}
				return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_f", Currency: "usd"}, nil
			})
			onRefundReceipt(env, &rec, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
				return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
			})
			env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rf", 100))
			var st RefundStatus
			err := env.GetWorkflowResult(&st)
			if rec.String() != tc.attempts || (err != nil) != tc.fails {
				t.Fatalf("attempts %s (want %s), err %v", &rec, tc.attempts, err)
			}
			if !tc.fails && (st.Outcome != OutcomeRefunded || len(st.Fallbacks) != tc.fallbacks || st.Fallbacks[0] != "refund") {
				t.Fatalf("outcome %s, fallbacks %v", st.Outcome, st.Fallbacks)
			}
		})
	}
}

// missing is RefundOrder asked to wait for an order that has no payment.
func missing() (activities.RefundResult, error) {
	return activities.RefundResult{}, temporal.NewNonRetryableApplicationError("order 42 has no payment yet", activities.ErrTypePaymentMissing, nil)
}

// TestOrderRefundWaitsForAMissingPayment: a refund that arrives before its
// order's payment asks again (AwaitPayment set) until the payment exists,
// then refunds and sends its receipt.
func TestOrderRefundWaitsForAMissingPayment(t *testing.T) {
	env, wfs := newEnv(t)
	var runs []bool
	var rec attempts
	onRefund(env, &rec, func(in activities.RefundInput) (activities.RefundResult, error) {
		runs = append(runs, in.AwaitPayment)
		if len(runs) < 4 {
			return missing()
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_m", Currency: "usd"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rm", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeRefunded || len(runs) != 4 || !runs[0] || !runs[3] {
		t.Fatalf("outcome %s after runs %v; want refunded after 4 runs, each waiting", st.Outcome, runs)
	}
	// The local attempt found no payment: the waits, then regular runs.
	if want := "refund:local refund:regular refund:regular refund:regular"; !strings.HasPrefix(rec.String(), want) {
		t.Fatalf("attempts %s, want %s first", &rec, want)
	}
}

// TestOrderRefundEndsNotPaidWhenTheWaitIsOver: past RefundAwaitPayment the
// refund asks once more without waiting and ends order_not_paid.
func TestOrderRefundEndsNotPaidWhenTheWaitIsOver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RefundAwaitPayment = 2 * time.Minute
	env, wfs := newEnvWith(t, cfg)
	var runs []bool
	onRefund(env, nil, func(in activities.RefundInput) (activities.RefundResult, error) {
		runs = append(runs, in.AwaitPayment)
		if in.AwaitPayment {
			return missing()
		}
		return activities.RefundResult{Outcome: activities.RefundOrderNotPaid}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_rn", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if st.Outcome != OutcomeOrderNotPaid || runs[len(runs)-1] || len(runs) < 3 || len(runs) > 12 {
		t.Fatalf("outcome %s after runs %v; want order_not_paid after a few waiting runs and a last one that does not wait", st.Outcome, runs)
	}
}

func TestRefundAwaitPaymentDefault(t *testing.T) {
	c := DefaultConfig()
	if want := c.PaymentScheduleToClose + c.PaymentProcessingMaxWait + 5*time.Minute; c.RefundAwaitPayment != want {
		t.Fatalf("default RefundAwaitPayment %s, want %s", c.RefundAwaitPayment, want)
	}
	c = Config{PaymentScheduleToClose: time.Hour, PaymentProcessingMaxWait: time.Hour}.withDefaults()
	if c.RefundAwaitPayment != 2*time.Hour+5*time.Minute {
		t.Fatalf("derived RefundAwaitPayment %s, want 2h5m", c.RefundAwaitPayment)
	}
}

// TestRefundIntakeClaimOnlyInTheFirstTask: the intake's refund claim
// reaches the local refund scheduled by the workflow's first task, and
// neither one scheduled by a task that follows a failed or timed-out one (a
// later history length) nor the regular activity the local attempt falls
// back to.
func TestRefundIntakeClaimOnlyInTheFirstTask(t *testing.T) {
	claim := &message.Claim{Token: 1, At: time.Unix(1_800_000_000, 0).UTC(), PaymentIntentID: "pi_1", Currency: "usd"}
	for length, want := range map[int]*message.Claim{3: claim, 6: nil} {
		env, wfs := newEnv(t)
		env.SetCurrentHistoryLength(length)
		var rec attempts
		var got []*message.Claim
		onRefund(env, &rec, func(in activities.RefundInput) (activities.RefundResult, error) {
			got = append(got, in.Claim)
			if len(got) == 1 {
				return activities.RefundResult{}, errors.New("stripe: 503")
			}
			return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_c", Currency: "usd"}, nil
		})
		onRefundReceipt(env, &rec, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
			return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
		})
		in := refundInput("evt_rclaim", 100)
		in.Claim = claim
		env.ExecuteWorkflow(wfs.OrderRefund, in)
		var st RefundStatus
		if err := env.GetWorkflowResult(&st); err != nil || st.Outcome != OutcomeRefunded {
			t.Fatalf("history length %d: status %+v, %v", length, st, err)
		}
		if len(got) != 2 || (got[0] != want && (got[0] == nil || want == nil || *got[0] != *want)) || got[1] != nil {
			t.Errorf("history length %d: the attempts' claims = %+v, want %+v then none (attempts %s)", length, got, want, &rec)
		}
	}
}

// pending is RefundOrder finding the order's payment not yet final, as
// this release's activity answers (non-retryable: the workflow waits).
func pending() (activities.RefundResult, error) {
	return activities.RefundResult{}, temporal.NewNonRetryableApplicationError("payment of order 42 is processing", activities.ErrTypePaymentPending, nil)
}

// TestOrderRefundBeforeItsPaymentThenProcessing: the refund arrives 40 h
// before its order, whose payment is a bank debit that then processes for
// 60 h, inside the payment's own bound (20 h + 72 h). The refund waits as
// long as the payment may stay open from when it found it, not from its
// own start, and refunds once when it settles at 100 h.
func TestOrderRefundBeforeItsPaymentThenProcessing(t *testing.T) {
	env, wfs := newEnv(t)
	start := env.Now()
	refunded := 0
	onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
		switch at := env.Now().Sub(start); {
		case at < 40*time.Hour:
			return missing()
		case at < 100*time.Hour:
			return pending()
		}
		refunded++
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_late", Currency: "usd"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r_late", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil || st.Outcome != OutcomeRefunded || refunded != 1 {
		t.Fatalf("after %s: outcome %q, %d refunds, err %v; want refunded once",
			env.Now().Sub(start).Round(time.Minute), st.Outcome, refunded, err)
	}
}

// TestOrderRefundPendingGivesUpAtItsPaymentsBound: a refund that waited for
// its missing payment, then found it pending for good, gives up once the
// payment's own bound from that moment has passed, and not before.
func TestOrderRefundPendingGivesUpAtItsPaymentsBound(t *testing.T) {
	cfg := DefaultConfig()
	env, wfs := newEnv(t)
	start := env.Now()
	var found time.Duration
	onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
		if at := env.Now().Sub(start); at < 40*time.Hour {
			return missing()
		} else if found == 0 {
			found = at
		}
		return pending()
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r_never", 100))
	err := env.GetWorkflowError()
	waited := env.Now().Sub(start)
	if err == nil || !strings.Contains(err.Error(), "processing") {
		t.Fatalf("err %v, want the PaymentPending failure", err)
	}
	if least := found + cfg.refundPaymentWait(); waited < least || waited > least+cfg.PaymentProcessingPoll+time.Minute {
		t.Fatalf("gave up after %s, want about %s (found pending at %s)", waited.Round(time.Minute), least, found.Round(time.Minute))
	}
}

// TestOrderRefundSettledLateInARunIsRetried: the refund waits for a pending
// payment for most of what one run of RefundOrder may take; the payment
// settles, and the attempt that claims the refund meets a transient
// failure (Stripe's 503). The refund is retried and made: PaymentPending
// ends each run, so the run that claims has its whole schedule. Short
// timeouts stand for the default 20 h run.
func TestOrderRefundSettledLateInARunIsRetried(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PaymentStartToClose = time.Minute
	cfg.PaymentScheduleToClose = 3 * time.Minute
	cfg.RetryMaximumInterval = time.Minute
	env, wfs := newEnvWith(t, cfg)
	start := env.Now()
	var calls []time.Duration
	onRefund(env, nil, func(activities.RefundInput) (activities.RefundResult, error) {
		at := env.Now().Sub(start)
		calls = append(calls, at.Round(time.Second))
		switch {
		case at < 2*time.Minute:
			return pending()
		case at < 150*time.Second:
			return activities.RefundResult{}, errors.New("refund order 42: stripe: 503 service unavailable")
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_x", Currency: "usd"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r_edge", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil || st.Outcome != OutcomeRefunded {
		t.Fatalf("outcome %q, err %v after attempts at %v; want refunded", st.Outcome, err, calls)
	}
}

// TestOrderRefundLocalPendingBehindItsVersion: a run whose local attempt
// found the payment pending before the change (GetVersion answers
// DefaultVersion, as its history replays) falls back to the regular
// activity, as it did.
func TestOrderRefundLocalPendingBehindItsVersion(t *testing.T) {
	env, wfs := newEnv(t)
	env.OnGetVersion(refundPendingChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	var rec attempts
	calls := 0
	onRefund(env, &rec, func(activities.RefundInput) (activities.RefundResult, error) {
		if calls++; calls == 1 {
			return activities.RefundResult{}, temporal.NewApplicationError("payment of order 42 is claimed", activities.ErrTypePaymentPending)
		}
		return activities.RefundResult{Outcome: activities.RefundRefunded, RefundID: "re_v", Currency: "usd"}, nil
	})
	onRefundReceipt(env, nil, func(activities.RefundReceiptInput) (activities.ReceiptResult, error) {
		return activities.ReceiptResult{Outcome: activities.ReceiptSent}, nil
	})
	env.ExecuteWorkflow(wfs.OrderRefund, refundInput("evt_r_lv", 100))
	var st RefundStatus
	if err := env.GetWorkflowResult(&st); err != nil || st.Outcome != OutcomeRefunded || len(st.Fallbacks) != 1 {
		t.Fatalf("status %+v, err %v; want refunded after one fallback", st, err)
	}
	if want := "refund:local refund:regular"; !strings.HasPrefix(rec.String(), want) {
		t.Fatalf("attempts %s, want %s", &rec, want)
	}
}
