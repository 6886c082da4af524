//go:build record

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestRecordRefundHistories writes OrderRefund histories for the replay
// test in workflows/, like TestRecordHistories. It writes today's
// (order_refund_local_*.json: the local first attempts); the histories of
// the release before them (order_refund_refunded.json,
// order_refund_exceeds.json: regular activities only) stay as recorded
// then, for the runs a rolling deploy finds open.
//
//	go test -tags record -run TestRecordRefundHistories ./lab/e2e/
func TestRecordRefundHistories(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	if st := wait(t, s, accept(t, s, order("evt_rec_rf_order", 11, "pm_card_visa")).MessageID); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("order = %+v", st)
	}
	cases := []struct {
		file string
		raw  []byte
	}{
		{"order_refund_local_refunded.json", refundMsg("evt_rec_rf_1", 11, 500)},
		{"order_refund_local_exceeds.json", refundMsg("evt_rec_rf_2", 11, 1500)},
	}
	for _, c := range cases {
		res := accept(t, s, c.raw)
		waitRefund(t, s, res.MessageID)
		iter := s.Client.GetWorkflowHistory(context.Background(), res.WorkflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
		path := filepath.Join(testenv.RepoRoot(), "workflows", "testdata", c.file)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d events)", path, len(h.Events))
	}
}
