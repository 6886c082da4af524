//go:build record

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestRecordHistories writes the histories the replay test in workflows/
// replays. The histories of a workflow type stay as they were recorded:
// runs started under them may be open when new code is deployed, so a
// change that fails to replay them goes under a new workflow type name
// (see workflows.OrderPlacedName), whose histories are recorded under new
// file names beside these. (Before any release, the fixtures were
// re-recorded when GetVersion was removed from OrderPlaced.)
//
//	go test -tags record -run TestRecordHistories ./lab/e2e/
func TestRecordHistories(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	// The fallback case: the local attempt's charge meets a 500 before
	// Stripe acts, so the regular activity charges.
	s.Sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_rec_fallback"}, Kind: stripesim.FaultErrorBefore, Times: 1})
	cases := map[string][]byte{
		"order_placed_paid.json":     order("evt_rec_paid", 1, "pm_card_visa"),
		"order_placed_declined.json": order("evt_rec_declined", 2, "pm_card_chargeDeclined"),
		"order_placed_fallback.json": order("evt_rec_fallback", 3, "pm_card_visa"),
	}
	for file, raw := range cases {
		res := accept(t, s, raw)
		wait(t, s, res.MessageID)
		writeHistory(t, s, res.WorkflowID, file)
	}
}

// TestRecordProcessingHistory records a run whose payment Stripe answers
// with processing: one poll finds it still processing, then Stripe settles
// it and a payment-settled signal wakes the workflow, which sends the
// receipt. It writes order_placed_processing_bounds.json, whose run
// recorded its wait bounds; order_placed_processing.json was recorded by
// the release before, which read them from the config.
//
//	go test -tags record -run TestRecordProcessingHistory ./lab/e2e/
func TestRecordProcessingHistory(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{Workflows: workflows.Config{PaymentProcessingPoll: 2 * time.Second, PaymentProcessingMaxWait: time.Hour}})
	ctx := context.Background()
	res := accept(t, s, order("evt_rec_processing", 4, "pm_card_processing"))
	var p store.Payment
	for deadline := time.Now().Add(30 * time.Second); p.State != store.PaymentProcessing; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("payment = %+v; want processing", p)
		}
		p, _ = s.Store.PaymentOf(ctx, message.ConsumerOrderPlaced, "evt_rec_processing")
	}
	time.Sleep(3 * time.Second) // one poll: still processing
	if err := s.Sims.Stripe.SettleProcessing(p.PaymentIntentID, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.SignalWorkflow(ctx, res.WorkflowID, "", workflows.PaymentSettledSignal,
		workflows.PaymentSettled{PaymentIntentID: p.PaymentIntentID, Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if st := wait(t, s, res.MessageID); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	writeHistory(t, s, res.WorkflowID, "order_placed_processing_bounds.json")
}

// writeHistory writes the history of workflow wfID to workflows/testdata.
func writeHistory(t *testing.T, s *testenv.Stack, wfID, file string) {
	t.Helper()
	iter := s.Client.GetWorkflowHistory(context.Background(), wfID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var h historypb.History
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testenv.RepoRoot(), "workflows", "testdata", file)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d events)", path, len(h.Events))
}

// TestRecordPendingRefundHistory records a refund Stripe answers pending:
// the workflow checks it a few times, Stripe settles it, and a
// refund-settled signal wakes the workflow, which sends the receipt. It
// writes order_refund_pending.json.
//
//	go test -tags record -run TestRecordPendingRefundHistory ./lab/e2e/
func TestRecordPendingRefundHistory(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	ctx := context.Background()
	accept(t, s, order("evt_rec_rp_o", 5, "pm_card_pendingRefund"))
	wait(t, s, "evt_rec_rp_o")
	res := accept(t, s, refundMsg("evt_rec_rp", 5, 700))
	var rf store.Refund
	for deadline := time.Now().Add(30 * time.Second); rf.State != store.RefundPending; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("refund = %+v; want pending", rf)
		}
		rf, _ = s.Store.RefundOf(ctx, message.ConsumerRefundRequested, "evt_rec_rp")
	}
	time.Sleep(4 * time.Second) // checks at 1, 2 (3 s in): still pending
	if err := s.Sims.Stripe.SettleRefund(rf.RefundID); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.SignalWorkflow(ctx, res.WorkflowID, "", workflows.RefundSettledSignal,
		workflows.RefundSettled{RefundID: rf.RefundID, Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if st := waitRefund(t, s, "evt_rec_rp"); st.Outcome != workflows.OutcomeRefunded {
		t.Fatalf("outcome = %+v", st)
	}
	writeHistory(t, s, res.WorkflowID, "order_refund_pending.json")
}
