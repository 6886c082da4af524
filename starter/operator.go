package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/reconcile"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// The operator commands settle the open cases of docs/runbook.md:
//
//	starter payments --state unknown|processing|unexpected
//	starter resolve MESSAGE_ID
//	starter redrive MESSAGE_ID
//	starter anomalies list|resolve (anomalies.go)

// cmdPayments lists the payments in one open state, oldest first, one JSON
// line each.
func cmdPayments(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	state := fs.String("state", "", "open state to list: "+fmt.Sprint(store.OpenPaymentStates))
	limit := fs.Int("limit", 100, "how many payments, oldest first")
	if err := fs.Parse(args); err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 0 || !slices.Contains(store.OpenPaymentStates, store.PaymentState(*state)) || *limit < 1 {
		return exitUsage, fmt.Errorf("%w: payments takes --state with one of %v (and -limit N > 0)", errUsage, store.OpenPaymentStates)
	}
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	ps, err := d.store.OpenPayments(ctx, store.PaymentState(*state), *limit)
	if err != nil {
		return exitError, err
	}
	return jsonLines(stdout, ps)
}

// jsonLines writes items to w, one JSON line each, and returns the exit
// code of a listing command.
func jsonLines[T any](w io.Writer, items []T) (int, error) {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return exitError, err
		}
	}
	return exitOK, nil
}

// resolveReport is what `starter resolve` prints: the payment's fields
// (for an order message) at the top, the refund and the receipt when the
// message has them.
type resolveReport struct {
	Consumer      string             `json:"consumer"`
	MessageID     string             `json:"message_id"`
	StateBefore   store.PaymentState `json:"state_before,omitempty"`
	StateAfter    store.PaymentState `json:"state_after,omitempty"`
	Changed       bool               `json:"changed"`
	Lookup        string             `json:"lookup,omitempty"`
	PaymentIntent *payment.Charge    `json:"payment_intent,omitempty"`
	Workflow      *resolvedRun       `json:"workflow,omitempty"`
	// Refund and Receipt are what resolve found for the message's refund
	// and its mail (an order's receipt or a refund receipt).
	Refund *reconcile.RefundResult `json:"refund,omitempty"`
	// OrderRefunds are the refunds of the message's payment that Stripe
	// created (recorded pending or succeeded), each read again.
	OrderRefunds []reconcile.RefundResult `json:"order_refunds,omitempty"`
	Receipt      *reconcile.ReceiptResult `json:"receipt,omitempty"`
	// Next tells the operator what, if anything, is left to do.
	Next string `json:"next,omitempty"`
}

type resolvedRun struct {
	ID        string `json:"id"`
	Status    string `json:"status,omitempty"`
	Signalled bool   `json:"signalled"`
	Error     string `json:"error,omitempty"`
}

// hasMail reports whether message st has a mail in the ledger.
func hasMail(st store.MessageStatus) bool {
	for _, e := range st.Effects {
		if e.Kind == store.KindEmail {
			return true
		}
	}
	return false
}

// cmdResolve settles each open effect of a message from its provider's
// record: the payment (a retrieve by the recorded ID, or a lookup over the
// claim's window when none is recorded), the refund (the PaymentIntent's
// refunds), the receipt or refund receipt (SendGrid's events as the webhook
// recorded them). A running workflow waiting for its payment is signalled,
// a closed one is left as it is (record only).
func cmdResolve(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	consumer, id, err := messageArgs("resolve", args)
	if err != nil {
		return exitUsage, err
	}
	pay, err := stripeClient(cfg, logger)
	if err != nil {
		return exitError, err
	}
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	has := func(st store.MessageStatus) bool { return st.Payment != nil || st.Refund != nil || hasMail(st) }
	if consumer, err = messageConsumer(ctx, d.store, consumer, id, has); err != nil {
		return exitError, err
	}
	wfID, err := identity.WorkflowID(consumer, id)
	if err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	st, err := d.store.Status(ctx, consumer, id)
	if err != nil {
		return exitError, err
	}
	if !has(st) {
		return exitNotFound, fmt.Errorf("no payment, refund or receipt is recorded for message %s (consumer %s)", id, consumer)
	}
	r := reconcile.Resolver{Store: d.store, Payments: pay}
	rep := resolveReport{Consumer: consumer, MessageID: id}
	code := exitOK
	if st.Payment != nil {
		if code, err = resolvePayment(ctx, cfg, &r, &rep, wfID, logger); err != nil {
			return code, err
		}
		if code == exitOK {
			if code, err = resolveOrderRefunds(ctx, &r, &rep, st.Payment.OrderID); err != nil {
				return code, err
			}
		}
	}
	if st.Refund != nil && code == exitOK {
		// None found is recorded only once no run can still create it.
		noRunOpen := !refundRunMayCreate(st, func() bool { return runMayBeOpen(ctx, cfg, wfID, logger) })
		res, err := r.ResolveRefund(ctx, consumer, id, noRunOpen)
		rep.Refund = &res
		switch {
		case errors.Is(err, reconcile.ErrRunMayCreate):
			code, rep.Next = exitRefused, "no refund exists at Stripe yet, but a run of "+wfID+" may still act (it is open, closed less than "+attemptBound(cfg.Workflows).String()+" ago, or Temporal could not tell): nothing recorded; try again once it is closed and its last attempt's start-to-close has passed"
		case errors.Is(err, reconcile.ErrStillOpen):
			code, rep.Next = exitStillOpen, err.Error()+": an operator must look (docs/runbook.md)"
		case errors.Is(err, reconcile.ErrStripe):
			return exitRefused, fmt.Errorf("refused: %w (nothing was changed)", err)
		case err != nil:
			return exitError, err
		}
	}
	for _, e := range st.Effects {
		if e.Kind != store.KindEmail || code != exitOK {
			continue
		}
		var orderID int64
		if st.Payment != nil {
			orderID = st.Payment.OrderID // an order's receipt; a refund receipt marks no order
		}
		res, err := r.ResolveReceipt(ctx, e, orderID)
		rep.Receipt = &res
		switch {
		case errors.Is(err, reconcile.ErrStillOpen):
			code, rep.Next = exitStillOpen, err.Error()+"; see docs/runbook.md"
		case err != nil:
			return exitError, err
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return exitError, err
	}
	return code, nil
}

// resolvePayment settles the message's payment into rep and returns the
// exit code so far; an error ends the command with the code returned.
func resolvePayment(ctx context.Context, cfg config.Config, r *reconcile.Resolver, rep *resolveReport, wfID string, logger *slog.Logger) (int, error) {
	res, err := r.Resolve(ctx, rep.Consumer, rep.MessageID)
	rep.StateBefore, rep.StateAfter, rep.Changed, rep.Lookup, rep.PaymentIntent = res.Before.State, res.After.State, res.Changed, res.Lookup, res.Stripe
	switch {
	case errors.Is(err, reconcile.ErrNoPaymentIntent):
		rep.Next = "no payment intent exists at Stripe for this message: nothing was charged; `starter redrive` may run it again"
		return exitNotFound, nil
	case errors.Is(err, reconcile.ErrStripe):
		// Stripe could not be read: nothing was changed.
		return exitRefused, fmt.Errorf("refused: %w (nothing was changed)", err)
	case err != nil:
		return exitError, err
	}
	rep.Workflow = signalSettled(ctx, cfg, wfID, res, logger)
	switch res.After.State {
	case store.PaymentSucceeded, store.PaymentFailed:
		if rep.Workflow.Status != "" && !rep.Workflow.Signalled && res.After.State == store.PaymentSucceeded &&
			rep.Workflow.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED.String() {
			rep.Next = "the workflow is closed: `starter redrive " + rep.MessageID + "` sends the receipt"
		}
		return exitOK, nil
	case store.PaymentClaimed, store.PaymentProcessing, store.PaymentUnknown, store.PaymentUnexpected:
	}
	rep.Next = "still " + string(res.After.State) + " at Stripe (" + res.After.StripeStatus + "): see docs/runbook.md"
	return exitStillOpen, nil
}

// resolveOrderRefunds reads again every refund of order orderID that Stripe
// created (recorded pending or succeeded; ResolveRefund) into
// rep.OrderRefunds and returns the exit code so far. Stripe may fail a
// refund after it succeeded; an audit's refund_mismatch finding names the
// paying message, so resolving it (one by one or with --finding) records a
// failure whose charge.refund.updated never reached a worker, and gives
// its amount back. A claimed refund is left to its own message's resolve,
// and one still pending does not hold the paying message open.
func resolveOrderRefunds(ctx context.Context, r *reconcile.Resolver, rep *resolveReport, orderID int64) (int, error) {
	refunds, err := r.Store.RefundsOfOrder(ctx, orderID)
	if err != nil {
		return exitError, err
	}
	for _, rf := range refunds {
		if rf.RefundID == "" || (rf.State != store.RefundPending && rf.State != store.RefundSucceeded) {
			continue
		}
		res, err := r.ResolveRefund(ctx, rf.Consumer, rf.MessageID, false)
		rep.OrderRefunds = append(rep.OrderRefunds, res)
		switch {
		case errors.Is(err, reconcile.ErrStillOpen):
			// Still pending at Stripe: its own workflow waits for it, and
			// resolve of its own message reports it open (exit 7).
		case errors.Is(err, reconcile.ErrStripe):
			return exitRefused, fmt.Errorf("refused: %w (the refunds listed before it are recorded)", err)
		case err != nil:
			return exitError, err
		}
	}
	return exitOK, nil
}

// refundRunMayCreate reports whether a run may still create st's refund:
// it is claimed and either its message waits in the inbox to be started (a
// refund claimed at intake has no run before the dispatcher starts one) or
// open says a run may be open (runMayBeOpen). A recorded refund has nothing
// left to create.
func refundRunMayCreate(st store.MessageStatus, open func() bool) bool {
	switch {
	case st.Refund == nil || st.Refund.State != store.RefundClaimed:
		return false
	case st.Inbox != nil && st.Inbox.State == store.InboxPending:
		return true
	}
	return open()
}

// runMayBeOpen reports whether a run of workflow wfID may still act: true
// when it is running, when it closed too recently for its last attempt to
// have ended (runMayAct), and when Temporal cannot be asked.
func runMayBeOpen(ctx context.Context, cfg config.Config, wfID string, logger *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tc, _, err := temporalclient.Dial(ctx, cfg.Temporal, logger)
	if err != nil {
		return true
	}
	defer tc.Close()
	desc, err := tc.DescribeWorkflow(ctx, wfID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return false
	case err != nil:
		return true
	}
	return runMayAct(desc.RawResponse.GetWorkflowExecutionInfo(), time.Now(), attemptBound(cfg.Workflows))
}

// attemptBound is how long an effect attempt may go on after its run
// closed: an attempt keeps its deadline but not its cancellation (a stop,
// or the run's termination, lets its claim, call and record finish), so a
// regular attempt may act up to its start-to-close after the run closed,
// and a local one up to twice LocalStartToClose; a minute more for the
// clocks. The workers' timeouts (PAYMENT_START_TO_CLOSE,
// LOCAL_START_TO_CLOSE) are read from the same variables.
func attemptBound(w workflows.Config) time.Duration {
	d := workflows.DefaultConfig()
	return max(cmp.Or(w.PaymentStartToClose, d.PaymentStartToClose), 2*cmp.Or(w.LocalStartToClose, d.LocalStartToClose)) + time.Minute
}

// runMayAct reports whether the run info describes may still act at now:
// it is running, or it closed less than bound ago (or at a time not
// known).
func runMayAct(info *workflowpb.WorkflowExecutionInfo, now time.Time, bound time.Duration) bool {
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true
	}
	closed := info.GetCloseTime()
	return closed == nil || now.Sub(closed.AsTime()) < bound
}

// signalSettled signals the workflow of the payment when it is running, so a
// wait for a processing payment ends now; a closed workflow is only
// reported (Postgres holds the record). Temporal being unreachable is
// reported too: the ledger is settled already, and a waiting workflow
// finds the outcome at its next poll.
func signalSettled(ctx context.Context, cfg config.Config, wfID string, res reconcile.Result, logger *slog.Logger) *resolvedRun {
	run := &resolvedRun{ID: wfID}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tc, _, err := temporalclient.Dial(ctx, cfg.Temporal, logger)
	if err != nil {
		run.Error = "temporal: " + err.Error()
		return run
	}
	defer tc.Close()
	desc, err := tc.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		run.Error = err.Error()
		return run
	}
	status := desc.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	run.Status = status.String()
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return run
	}
	sig := workflows.PaymentSettled{PaymentIntentID: res.After.PaymentIntentID, FailureCode: res.After.FailureCode, DeclineCode: res.After.DeclineCode}
	if res.Stripe != nil {
		sig.Status = res.Stripe.Status
	}
	if err := tc.SignalWorkflow(ctx, wfID, "", workflows.PaymentSettledSignal, sig); err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			run.Error = "signal: " + err.Error()
		}
		return run
	}
	run.Signalled = true
	return run
}

// redriveRefusal says why the workflow of message st must not run again,
// or "" when it may. It is refused while any effect of the message may
// exist at a provider without its outcome in Postgres, and names the first
// it finds: the payment (paymentRefusal), a claimed refund (Stripe may have
// refunded it, and past its 24 h key window a new run's refund would be a
// second one), or an order or refund receipt claimed or in flight
// (SendGrid may have sent it, and it has no key). `starter resolve`
// settles each of them first.
func redriveRefusal(st store.MessageStatus) string {
	if why := paymentRefusal(st.Payment); why != "" {
		return why
	}
	if r := st.Refund; r != nil && r.State == store.RefundClaimed {
		return "refund " + r.Key + " is claimed: Stripe may have refunded it; run `starter resolve` first"
	}
	for _, e := range st.Effects {
		if e.Kind == store.KindEmail && (e.State == store.StateClaimed || e.State == store.StateInFlight) {
			what := "receipt"
			if st.Refund != nil {
				what = "refund receipt"
			}
			return what + " " + e.Key + " is " + string(e.State) + ": SendGrid may have sent it; run `starter resolve` first"
		}
	}
	return ""
}

// paymentRefusal says why a workflow must not be run again while its
// payment is in state p, or "" when it may. A new run charges only through
// ChargeOrder, which reads the ledger first, so it is refused exactly when
// Stripe may hold a charge whose outcome Postgres does not record:
//
//   - unknown, unexpected: nobody established the outcome;
//   - claimed or processing with a PaymentIntent ID recorded: a
//     PaymentIntent was (or may have been) confirmed, and its outcome is
//     not recorded yet.
//
// It may run again when there is no payment row, when the payment is final
// (succeeded: the new run sends the receipt without charging; failed: it
// ends as payment_failed without calling Stripe), or when it is claimed
// with no PaymentIntent ID. That one may hide a PaymentIntent, even a
// confirmed one (the ID is recorded with the confirmation's outcome, and
// the earlier run may have stopped in between), but the new run's
// ChargeOrder finds it: its create is replayed under the same key, which
// returns the same PaymentIntent, and past the key window it looks over the
// claim's window first; so the new run records that charge rather than
// making another.
func paymentRefusal(p *store.Payment) string {
	if p == nil {
		return ""
	}
	switch p.State {
	case store.PaymentSucceeded, store.PaymentFailed:
		return ""
	case store.PaymentUnknown, store.PaymentUnexpected:
		return "payment is " + string(p.State) + ": a charge may exist; run `starter resolve` first"
	case store.PaymentClaimed, store.PaymentProcessing:
		if p.PaymentIntentID != "" {
			return "payment is " + string(p.State) + " with payment intent " + p.PaymentIntentID + " recorded: a charge may exist; run `starter resolve` first"
		}
		return ""
	}
	return "payment is in state " + string(p.State) + ", which redrive does not know"
}

// redriveStatuses are the closed statuses a redrive re-runs: the ones
// ALLOW_DUPLICATE_FAILED_ONLY lets through.
var redriveStatuses = []enumspb.WorkflowExecutionStatus{
	enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
	enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED,
	enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT,
	enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED,
}

// redriveReport is what `starter redrive` prints.
type redriveReport struct {
	WorkflowID     string             `json:"workflow_id"`
	PreviousRunID  string             `json:"previous_run_id,omitempty"`
	PreviousStatus string             `json:"previous_status,omitempty"`
	PaymentState   store.PaymentState `json:"payment_state,omitempty"`
	RunID          string             `json:"run_id,omitempty"`
	Refused        string             `json:"refused,omitempty"`
}

// cmdRedrive starts a failed (terminated, timed out, canceled) workflow
// again from its recorded message, with ALLOW_DUPLICATE_FAILED_ONLY for
// this one start; every other start keeps REJECT_DUPLICATE.
func cmdRedrive(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	consumer, id, err := messageArgs("redrive", args)
	if err != nil {
		return exitUsage, err
	}
	// Postgres first: a refusal needs no Temporal, and changes nothing.
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	if consumer, err = messageConsumer(ctx, d.store, consumer, id, func(st store.MessageStatus) bool { return st.Inbox != nil }); err != nil {
		return exitError, err
	}
	wfID, err := identity.WorkflowID(consumer, id)
	if err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	rep := redriveReport{WorkflowID: wfID}
	refuse := func(why string) (int, error) {
		rep.Refused = why
		_ = json.NewEncoder(stdout).Encode(rep)
		return exitRefused, fmt.Errorf("refused: %s", why)
	}

	st, err := d.store.Status(ctx, consumer, id)
	if err != nil {
		return exitError, err
	}
	if st.Inbox == nil {
		return exitNotFound, fmt.Errorf("message %s (consumer %s) is not in the inbox: nothing to run again", id, consumer)
	}
	if st.Payment != nil {
		rep.PaymentState = st.Payment.State
	}
	if why := redriveRefusal(st); why != "" {
		return refuse(why)
	}
	if err := d.dialTemporal(ctx, cfg, logger); err != nil {
		return exitError, err
	}
	desc, err := d.tc.DescribeWorkflow(ctx, wfID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return refuse("Temporal has no run of " + wfID + " (never started, or past the namespace's retention)")
	case err != nil:
		return exitError, fmt.Errorf("describe workflow %s: %w", wfID, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	rep.PreviousRunID, rep.PreviousStatus = info.GetExecution().GetRunId(), info.GetStatus().String()
	if !slices.Contains(redriveStatuses, info.GetStatus()) {
		return refuse("the last run is " + info.GetStatus().String() + ": only a failed, terminated, timed-out or canceled run is run again")
	}
	routes := route.Default()
	m, err := routes.Decode(st.Inbox.Payload)
	if err != nil {
		return exitError, fmt.Errorf("recorded message %s cannot be started again: %w", id, err)
	}
	ws, err := routes.Start(m)
	if err != nil {
		return exitError, fmt.Errorf("recorded message %s cannot be started again: %w", id, err)
	}
	opts := intake.StartOptions(cfg.TaskQueue, ws)
	// The one start that may reuse a closed ID: only a failed run's.
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	var run client.WorkflowRun
	for try := 0; ; try++ {
		run, err = d.tc.ExecuteWorkflow(ctx, opts, ws.Workflow, ws.Input)
		var busy *serviceerror.ResourceExhausted
		if err == nil || !errors.As(err, &busy) || try >= 5 {
			break
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return exitError, fmt.Errorf("start workflow %s again: %w", wfID, err)
	}
	rep.RunID = run.GetRunID()
	logger.Info("workflow redriven", "workflow_id", wfID, "run_id", rep.RunID, "previous_run_id", rep.PreviousRunID)
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return exitError, err
	}
	return exitOK, nil
}

// stripeClient builds the Stripe client of `starter resolve` from the
// configuration (STRIPE_API_KEY, STRIPE_BASE_URL), as the worker does.
func stripeClient(cfg config.Config, logger *slog.Logger) (*payment.Client, error) {
	sc := cfg.Stripe
	sc.Timeout, sc.Logger = 15*time.Second, logger
	c, err := payment.New(sc)
	if err != nil {
		return nil, fmt.Errorf("stripe client: %w", err)
	}
	return c, nil
}

// messageConsumer returns the consumer an operator command acts for: the
// -consumer flag when given, else the first route's consumer whose record of
// message id satisfies has, else the first route's (whose absent record the
// command then reports). The registry names the consumers; this file names
// none.
func messageConsumer(ctx context.Context, st *store.Store, flagValue, id string, has func(store.MessageStatus) bool) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	routes := route.Default().Routes()
	for _, r := range routes {
		ms, err := st.Status(ctx, r.Consumer, id)
		if err != nil {
			return "", err
		}
		if has(ms) {
			return r.Consumer, nil
		}
	}
	return routes[0].Consumer, nil
}

// messageArgs parses the arguments of a command about one message: an
// optional -consumer and the message ID, which must make a valid workflow
// ID. Errors wrap errUsage.
func messageArgs(name string, args []string) (consumer, id string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := fs.String("consumer", "", "consumer that handled the message (default: the one with a record of it)")
	if err := fs.Parse(args); err != nil {
		return "", "", fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 1 {
		return "", "", fmt.Errorf("%w: %s takes one MESSAGE_ID", errUsage, name)
	}
	id = fs.Arg(0)
	check := *c
	if check == "" {
		check = route.Default().Routes()[0].Consumer
	}
	if _, err := identity.WorkflowID(check, id); err != nil {
		return "", "", fmt.Errorf("%w: %w", errUsage, err)
	}
	return *c, id, nil
}
