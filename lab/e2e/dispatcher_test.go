package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestDispatcherStartsRowsLeftPending is the crash window between the ack of
// a delivery and its workflow start: the inbox row is committed and pending,
// the process is gone, and no copy will ever come (the broker was acked).
// The dispatcher alone must start the workflow, once, and mark the row.
func TestDispatcherStartsRowsLeftPending(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	ctx := context.Background()
	ids := []string{"evt_pend1", "evt_pend2"}
	for i, id := range ids {
		m, err := route.Default().Decode(order(id, int64(71+i), "pm_card_visa"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Store.InsertInbox(ctx, store.InboxEntry{Consumer: m.Consumer, MessageID: m.ID, Payload: m.Raw, PayloadHash: m.Hash(), Source: "jetstream"}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := intake.NewDispatcher(s.Intake, intake.DispatcherConfig{MinAge: -1, Interval: 50 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	stop := func() {
		if cancel != nil {
			cancel()
			cancel = nil
			if err := <-done; err != nil {
				t.Errorf("dispatcher: %v", err)
			}
		}
	}
	defer stop()
	testenv.Eventually(t, 30*time.Second, "rows started and marked dispatched", func() bool {
		return count(t, s, `SELECT count(*) FROM inbox WHERE state = 'dispatched'`) == len(ids)
	})
	for _, id := range ids {
		if st := wait(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s: outcome %+v, want completed", id, st)
		}
	}
	stop()
	for _, id := range ids {
		expectOnce(t, s, id)
	}
}
