package workflows

import (
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays histories recorded from real runs
// (see lab/e2e/record_history_test.go) against today's workflow code. A
// change that would break running workflows — a different activity order, a
// new command before an old one — fails here with a non-determinism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/")
	}
	wfs, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			wfs.Register(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// TestReplayWithLoweredBounds: a run records its wait bounds where it first
// waits, so that a deploy that lowers PAYMENT_PROCESSING_MAX_WAIT below what
// an open run has already waited replays it as it ran. The recorded run
// (order_placed_processing_bounds.json) waited about 3 s for its processing
// payment under a bound of 1 h; replayed with a bound of 1 s, code that read
// the config would take the timeout where the history holds a timer.
func TestReplayWithLoweredBounds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PaymentProcessingPoll = time.Second
	cfg.PaymentProcessingMaxWait = time.Second
	wfs, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := worker.NewWorkflowReplayer()
	wfs.Register(r)
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", "order_placed_processing_bounds.json")); err != nil {
		t.Fatalf("replay with PaymentProcessingMaxWait lowered to 1s: %v", err)
	}
}

// TestReplayPendingRefundWithLoweredBound: a refund waiting for Stripe
// records RefundPendingMaxWait where its wait begins, so a deploy that
// lowers it replays the recorded run (order_refund_pending.json waited
// about 4 s under 30 days) as it ran.
func TestReplayPendingRefundWithLoweredBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RefundPendingMaxWait = time.Second
	wfs, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := worker.NewWorkflowReplayer()
	wfs.Register(r)
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", "order_refund_pending.json")); err != nil {
		t.Fatalf("replay with RefundPendingMaxWait lowered to 1s: %v", err)
	}
}
