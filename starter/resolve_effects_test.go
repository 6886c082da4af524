package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/workflows"
)

// TestResolveSettlesRefundsAndReceipts: `starter resolve` settles a refund
// and a receipt as it does a payment, from the provider's record. A claimed
// refund whose answer was lost is found among its PaymentIntent's refunds
// and recorded once; one Stripe has no refund for stays claimed while a run
// may still create it (Temporal unreachable here: exit 6). A receipt whose
// SendGrid event arrived is recorded sent; one with no event stays open
// (exit 7).
func TestResolveSettlesRefundsAndReceipts(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()

	// A refund Stripe made, its answer lost.
	f.paid(t, "evt_o5", 505)
	p, err := f.db.PaymentOf(ctx, "order-placed", "evt_o5")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf5", OrderID: 505, Amount: 300, Reason: "requested_by_customer", Key: "refund:evt_rf5", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	made, err := f.acts.Payments.Refund(ctx, payment.RefundRequest{IdempotencyKey: "refund:evt_rf5", MessageID: "evt_rf5", OrderID: 505, PaymentIntentID: p.PaymentIntentID, Amount: 300, Reason: "requested_by_customer"})
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf5")
	if code != exitOK || !strings.Contains(out, made.ID) {
		t.Fatalf("resolve of a refund Stripe made: exit %d, %s %s", code, out, stderr)
	}
	if rf, err := f.db.RefundOf(ctx, "order-refund", "evt_rf5"); err != nil || rf.State != store.RefundSucceeded || rf.RefundID != made.ID {
		t.Fatalf("refund %+v, %v; want succeeded %s", rf, err, made.ID)
	}
	if code, _, _ := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf5"); code != exitOK {
		t.Fatalf("resolve again: exit %d", code)
	}
	if n := f.sims.Stripe.Stats().RefundsByMessage["evt_rf5"]; n != 1 {
		t.Fatalf("%d refunds at Stripe, want 1", n)
	}

	// A claimed refund Stripe has none of, while a run may be open.
	if _, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf6", OrderID: 505, Amount: 100, Reason: "requested_by_customer", Key: "refund:evt_rf6", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf6"); code != exitRefused {
		t.Fatalf("resolve of a refund not made while a run may be open: exit %d, %s; want %d", code, out, exitRefused)
	}
	if rf, _ := f.db.RefundOf(ctx, "order-refund", "evt_rf6"); rf.State != store.RefundClaimed {
		t.Fatalf("refund %+v, want still claimed", rf)
	}

	// A receipt SendGrid reported, its answer lost; and one it did not.
	for _, id := range []string{"evt_o7", "evt_o8"} {
		f.paid(t, id, map[string]int64{"evt_o7": 507, "evt_o8": 508}[id])
		if _, _, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: "order-placed", MessageID: id, OrderID: map[string]int64{"evt_o7": 507, "evt_o8": 508}[id], Key: "email:" + id, RequestHash: "h", Policy: store.AtLeastOnce}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.RecordProviderEvent(ctx, store.ProviderEvent{Consumer: "sendgrid-events", EventID: "sg_7", Payload: []byte(`{}`), PayloadHash: "x", Source: "test"},
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := store.ApplyEmailEvent(ctx, tx, store.EmailEvent{SGEventID: "sg_7", Key: "email:evt_o7", Event: "processed", SGMessageID: "x7.filter001"})
			return err
		}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runStarter(t, "resolve", "evt_o7")
	if code != exitOK || !strings.Contains(out, `"x_message_id": "x7"`) {
		t.Fatalf("resolve of a reported receipt: exit %d, %s %s", code, out, stderr)
	}
	if e, err := f.db.Effect(ctx, "email:evt_o7"); err != nil || e.State != store.StateSucceeded || e.ProviderRef != "x7" {
		t.Fatalf("receipt %+v, %v; want succeeded x7", e, err)
	}
	code, out, _ = runStarter(t, "resolve", "evt_o7")
	var again resolveReport
	if err := json.Unmarshal([]byte(out), &again); err != nil || code != exitOK || again.Receipt == nil ||
		again.Receipt.Before != store.StateSucceeded || again.Receipt.Changed {
		t.Fatalf("resolve of a reported receipt again: exit %d, %s; want 0, nothing to do", code, out)
	}
	if code, out, _ := runStarter(t, "resolve", "evt_o8"); code != exitStillOpen || !strings.Contains(out, "no event") {
		t.Fatalf("resolve of an unreported receipt: exit %d, %s; want %d", code, out, exitStillOpen)
	}
}

// TestResolveRefundWhenAProviderOrPostgresIsDown: Stripe unreachable
// refuses (exit 6) and records nothing, Postgres unreachable is an error
// (exit 1); the same resolve once both answer records the refund once. A
// resolve killed between its read and its record (SIGKILL) leaves the
// refund claimed, which is this case again.
func TestResolveRefundWhenAProviderOrPostgresIsDown(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()
	f.paid(t, "evt_o9", 509)
	p, err := f.db.PaymentOf(ctx, "order-placed", "evt_o9")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf9", OrderID: 509, Amount: 200, Reason: "requested_by_customer", Key: "refund:evt_rf9", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.acts.Payments.Refund(ctx, payment.RefundRequest{IdempotencyKey: "refund:evt_rf9", MessageID: "evt_rf9", OrderID: 509, PaymentIntentID: p.PaymentIntentID, Amount: 200}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRIPE_BASE_URL", "http://127.0.0.1:1")
	if code, _, stderr := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf9"); code != exitRefused || !strings.Contains(stderr, "nothing was changed") {
		t.Fatalf("Stripe down: exit %d, %s; want %d", code, stderr, exitRefused)
	}
	if rf, _ := f.db.RefundOf(ctx, "order-refund", "evt_rf9"); rf.State != store.RefundClaimed {
		t.Fatalf("refund %+v after a refused resolve, want claimed", rf)
	}
	t.Setenv("STRIPE_BASE_URL", f.sims.StripeURL)
	good := dbURL(t)
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if code, _, _ := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf9"); code != exitError {
		t.Fatalf("Postgres down: exit %d, want %d", code, exitError)
	}
	t.Setenv("DATABASE_URL", good)
	if code, out, stderr := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf9"); code != exitOK || !strings.Contains(out, `"changed": true`) {
		t.Fatalf("both up: exit %d, %s %s", code, out, stderr)
	}
	if rf, _ := f.db.RefundOf(ctx, "order-refund", "evt_rf9"); rf.State != store.RefundSucceeded {
		t.Fatalf("refund %+v, want succeeded", rf)
	}
}

func dbURL(t *testing.T) string {
	t.Helper()
	u, ok := os.LookupEnv("DATABASE_URL")
	if !ok {
		t.Fatal("DATABASE_URL is not set")
	}
	return u
}

// TestResolveLeavesARefundWaitingForItsRun: a refund claimed with its
// message's inbox row has no run until the dispatcher starts one, so while
// that row is pending `resolve` must not record "none found" however
// Temporal answers (it has no run to find); once the row is dispatched,
// Temporal decides. A refund no longer claimed has nothing left to create.
func TestResolveLeavesARefundWaitingForItsRun(t *testing.T) {
	claimed := &store.Refund{State: store.RefundClaimed}
	noRun := func() bool { return false }
	for _, tc := range []struct {
		name string
		st   store.MessageStatus
		open func() bool
		want bool
	}{
		{"claimed at intake, its message pending", store.MessageStatus{Refund: claimed, Inbox: &store.InboxRow{State: store.InboxPending}}, noRun, true},
		{"claimed, its message dispatched, no run", store.MessageStatus{Refund: claimed, Inbox: &store.InboxRow{State: store.InboxDispatched}}, noRun, false},
		{"claimed, its message dispatched, a run open", store.MessageStatus{Refund: claimed, Inbox: &store.InboxRow{State: store.InboxDispatched}}, func() bool { return true }, true},
		{"claimed, its inbox row pruned, no run", store.MessageStatus{Refund: claimed}, noRun, false},
		{"recorded", store.MessageStatus{Refund: &store.Refund{State: store.RefundSucceeded}, Inbox: &store.InboxRow{State: store.InboxPending}}, func() bool { return true }, false},
	} {
		if got := refundRunMayCreate(tc.st, tc.open); got != tc.want {
			t.Errorf("%s: a run may create the refund = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRunMayAct: a run may still act while it runs and, once closed, until
// its last attempt's deadline may have passed: a terminated run's attempt
// keeps going (its effect ignores the cancellation) and may still refund.
func TestRunMayAct(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	bound := attemptBound(workflows.Config{})
	if bound != 3*time.Minute {
		t.Fatalf("attemptBound of the defaults = %s, want 3m (2m start-to-close and a minute)", bound)
	}
	closedAgo := func(status enumspb.WorkflowExecutionStatus, ago time.Duration) *workflowpb.WorkflowExecutionInfo {
		return &workflowpb.WorkflowExecutionInfo{Status: status, CloseTime: timestamppb.New(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name string
		info *workflowpb.WorkflowExecutionInfo
		want bool
	}{
		{"running", &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}, true},
		{"terminated a moment ago", closedAgo(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, 5*time.Second), true},
		{"failed 2m ago", closedAgo(enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, 2*time.Minute), true},
		{"terminated 3m ago", closedAgo(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, 3*time.Minute), false},
		{"completed an hour ago", closedAgo(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, time.Hour), false},
		{"closed at a time not known", &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED}, true},
	} {
		if got := runMayAct(tc.info, now, bound); got != tc.want {
			t.Errorf("%s: may act = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestResolveSettlesAPendingRefund: `starter resolve` of a refund recorded
// pending retrieves it: still pending at Stripe, it stays pending (exit 7);
// once Stripe moved it, it is recorded succeeded.
func TestResolveSettlesAPendingRefund(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()
	if _, err := f.charge(t, "evt_o9", 509, "pm_card_pendingRefund"); err != nil {
		t.Fatal(err)
	}
	p, err := f.db.PaymentOf(ctx, "order-placed", "evt_o9")
	if err != nil {
		t.Fatal(err)
	}
	claim, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf9", OrderID: 509, Amount: 300, Reason: "requested_by_customer", Key: "refund:evt_rf9", RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	made, err := f.acts.Payments.Refund(ctx, payment.RefundRequest{IdempotencyKey: "refund:evt_rf9", MessageID: "evt_rf9", OrderID: 509, PaymentIntentID: p.PaymentIntentID, Amount: 300, Reason: "requested_by_customer"})
	if err != nil || made.Status != "pending" {
		t.Fatalf("refund %+v, %v; want pending", made, err)
	}
	if _, err := f.db.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: "evt_rf9", OrderID: 509, Key: "refund:evt_rf9", Claim: claim.Claim, RefundID: made.ID, Status: made.Status}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf9"); code != exitStillOpen || !strings.Contains(out, "pending at Stripe") {
		t.Fatalf("resolve of a refund still pending: exit %d, %s; want %d", code, out, exitStillOpen)
	}
	if rf, _ := f.db.RefundOf(ctx, "order-refund", "evt_rf9"); rf.State != store.RefundPending {
		t.Fatalf("refund %+v, want pending", rf)
	}
	// The paying message's resolve reads the refund too, and a refund still
	// pending does not hold it open.
	if code, out, stderr := runStarter(t, "resolve", "-consumer", "order-placed", "evt_o9"); code != exitOK || !strings.Contains(out, `"order_refunds"`) || !strings.Contains(out, `"state": "pending"`) {
		t.Fatalf("resolve of the paying message: exit %d, %s %s; want 0, the refund listed pending", code, out, stderr)
	}
	if err := f.sims.Stripe.SettleRefund(made.ID); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf9"); code != exitOK {
		t.Fatalf("resolve of a refund Stripe settled: exit %d, %s %s", code, out, stderr)
	}
	if rf, _ := f.db.RefundOf(ctx, "order-refund", "evt_rf9"); rf.State != store.RefundSucceeded {
		t.Fatalf("refund %+v, want succeeded", rf)
	}
}

// reversedRefund charges order with pm_card_refundFail, refunds 300 of it
// for message refundID, records the refund succeeded and has Stripe fail
// it afterwards, with no webhook: a reversal whose charge.refund.updated
// never reached a worker.
func (f *opsFixture) reversedRefund(t *testing.T, orderMsg, refundID string, order int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.charge(t, orderMsg, order, "pm_card_refundFail"); err != nil {
		t.Fatal(err)
	}
	p, err := f.db.PaymentOf(ctx, "order-placed", orderMsg)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: refundID, OrderID: order, Amount: 300, Reason: "requested_by_customer", Key: "refund:" + refundID, RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	made, err := f.acts.Payments.Refund(ctx, payment.RefundRequest{IdempotencyKey: "refund:" + refundID, MessageID: refundID, OrderID: order, PaymentIntentID: p.PaymentIntentID, Amount: 300, Reason: "requested_by_customer"})
	if err != nil || made.Status != "succeeded" {
		t.Fatalf("refund %+v, %v; want succeeded", made, err)
	}
	if _, err := f.db.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: refundID, OrderID: order, Key: "refund:" + refundID, Claim: claim.Claim, RefundID: made.ID, Status: made.Status}); err != nil {
		t.Fatal(err)
	}
	if err := f.sims.Stripe.SettleRefund(made.ID); err != nil {
		t.Fatal(err)
	}
}

// assertReversed fails unless the refund of message refundID is recorded
// failed with its 300 given back to order's payment.
func (f *opsFixture) assertReversed(t *testing.T, refundID string, order int64) {
	t.Helper()
	ctx := context.Background()
	rf, err := f.db.RefundOf(ctx, "order-refund", refundID)
	if err != nil || rf.State != store.RefundFailed || rf.RefundStatus != "failed" {
		t.Fatalf("refund %+v, %v; want failed", rf, err)
	}
	if refunded, _, err := f.db.RefundedAmount(ctx, order); err != nil || refunded != 0 {
		t.Fatalf("refunded_amount %d, %v; want 0: the failed refund's 300 given back", refunded, err)
	}
}

// TestResolveRecordsARefundStripeFailedAfterItSucceeded: a refund recorded
// succeeded that Stripe failed later, with the event never applied (sent
// before the endpoint subscribed to charge.refund.updated), is recorded
// failed by resolve of its own message, and, found by the audit, by a bulk
// resolve of the refund_mismatch findings, which name the paying message.
// Before, resolve left a succeeded refund as it was, without a call.
func TestResolveRecordsARefundStripeFailedAfterItSucceeded(t *testing.T) {
	f := newOpsFixture(t)

	f.reversedRefund(t, "evt_o11", "evt_rf11", 511)
	code, out, stderr := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf11")
	if code != exitOK || !strings.Contains(out, `"lookup": "retrieve"`) || !strings.Contains(out, `"changed": true`) {
		t.Fatalf("resolve of the reversed refund: exit %d, %s %s; want 0, retrieved, changed", code, out, stderr)
	}
	f.assertReversed(t, "evt_rf11", 511)
	if code, out, _ := runStarter(t, "resolve", "-consumer", "order-refund", "evt_rf11"); code != exitOK || strings.Contains(out, `"lookup"`) {
		t.Fatalf("resolve again: exit %d, %s; want 0 and no call (a failed refund is final)", code, out)
	}

	f.reversedRefund(t, "evt_o12", "evt_rf12", 512)
	code, out, stderr = runStarter(t, "audit", "--since", "10m", "--until", "0s")
	if code != exitFindings || !strings.Contains(out, `"refund_mismatch"`) || !strings.Contains(out, `"evt_o12"`) {
		t.Fatalf("audit: exit %d, %s %s; want a refund_mismatch finding naming evt_o12", code, out, stderr)
	}
	code, out, stderr = runStarter(t, "resolve", "--finding", "refund_mismatch")
	rows, sum := bulkLines(t, out)
	if code != exitOK || sum.Selected != 1 || len(rows) != 1 || rows[0].MessageID != "evt_o12" {
		t.Fatalf("bulk resolve of the finding: exit %d, rows %+v, summary %+v, %s", code, rows, sum, stderr)
	}
	f.assertReversed(t, "evt_rf12", 512)
	if code, out, stderr := runStarter(t, "audit", "--since", "10m", "--until", "0s"); strings.Contains(out, `"refund_mismatch"`) {
		t.Fatalf("audit after the resolve: exit %d, %s %s; want no refund_mismatch: the ledger agrees with Stripe", code, out, stderr)
	}
}
