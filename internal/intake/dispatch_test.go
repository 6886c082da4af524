package intake_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

func placed(id string, orderID int64) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`, id, orderID)
}

func refundRequested(id string, orderID int64) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.refund_requested", "data": {"order_id": %d, "amount": 500, "reason": "requested_by_customer"}}`, id, orderID)
}

// recordPending puts raw in the inbox as a pending row, as a consumer that
// acked it and died before the start would leave it.
func recordPending(t *testing.T, st *store.Store, raw []byte) *message.Message {
	t.Helper()
	m, err := route.Default().Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertInbox(context.Background(), store.InboxEntry{Consumer: m.Consumer, MessageID: m.ID, Payload: m.Raw, PayloadHash: m.Hash(), Source: "jetstream"}); err != nil {
		t.Fatal(err)
	}
	return m
}

// newDispatchFixture is a fresh database and an intake with the default
// routes on a fake Temporal.
func newDispatchFixture(t *testing.T) (*pgxpool.Pool, *store.Store, *testenv.FakeTemporal, *intake.Intake) {
	t.Helper()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	tc := testenv.NewFakeTemporal()
	in, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return pool, st, tc, in
}

func inboxState(t *testing.T, st *store.Store, consumer, id string) store.InboxRow {
	t.Helper()
	ms, err := st.Status(context.Background(), consumer, id)
	if err != nil || ms.Inbox == nil {
		t.Fatalf("status of %s/%s: %+v, %v", consumer, id, ms.Inbox, err)
	}
	return *ms.Inbox
}

// TestRollingDeployKeepsANewTypePending is a rolling deploy that adds
// order.refund_requested: an old worker, whose registry lacks the type,
// dispatches beside a new one. The old one must leave the refund rows
// pending (not quarantine and settle them without a workflow), still
// dispatch its own type although older refund rows fill its batches, and
// the new one must then start the refunds.
func TestRollingDeployKeepsANewTypePending(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	tc := testenv.NewFakeTemporal()
	oldRoutes, err := route.New(route.OrderPlaced())
	if err != nil {
		t.Fatal(err)
	}
	oldIn, err := intake.New(st, tc, intake.Config{Routes: oldRoutes, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	newIn, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var refunds, orders []*message.Message
	for i := range 3 {
		refunds = append(refunds, recordPending(t, st, refundRequested(fmt.Sprintf("evt_roll_r%d", i), int64(700+i))))
	}
	for i := range 2 {
		orders = append(orders, recordPending(t, st, placed(fmt.Sprintf("evt_roll_o%d", i), int64(710+i))))
	}

	oldD, err := intake.NewDispatcher(oldIn, intake.DispatcherConfig{MinAge: -1, BatchSize: 2, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldD.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range orders {
		if row := inboxState(t, st, m.Consumer, m.ID); row.State != store.InboxDispatched || row.WorkflowID == "" {
			t.Errorf("old worker: order %s is %s (workflow %q), want dispatched with its workflow", m.ID, row.State, row.WorkflowID)
		}
	}
	for _, m := range refunds {
		if row := inboxState(t, st, m.Consumer, m.ID); row.State != store.InboxPending {
			t.Errorf("old worker: refund %s is %s (workflow %q), want pending for a worker that knows its type", m.ID, row.State, row.WorkflowID)
		}
	}
	if q, err := st.QuarantineList(ctx, 10); err != nil || len(q) != 0 {
		t.Errorf("old worker quarantined %d rows (%v), want none: the rows are valid", len(q), err)
	}

	newD, err := intake.NewDispatcher(newIn, intake.DispatcherConfig{MinAge: -1, BatchSize: 2, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newD.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	starts := tc.Starts()
	for _, m := range refunds {
		row := inboxState(t, st, m.Consumer, m.ID)
		if row.State != store.InboxDispatched || row.WorkflowID != m.Consumer+"/"+m.ID || starts[row.WorkflowID] != 1 {
			t.Errorf("new worker: refund %s is %s (workflow %q, %d starts), want dispatched and started once", m.ID, row.State, row.WorkflowID, starts[m.Consumer+"/"+m.ID])
		}
	}
}

// TestQuarantineRetryRunsAMessageSettledWithoutAWorkflow: an earlier
// dispatcher that could not decode a row quarantined it and marked it
// dispatched with no workflow. Sending the quarantined bytes again (what
// `starter quarantine retry` does) must start its workflow, not answer
// "duplicate" for a message that never ran.
func TestQuarantineRetryRunsAMessageSettledWithoutAWorkflow(t *testing.T) {
	ctx := context.Background()
	pool, st, tc, in := newDispatchFixture(t)
	m := recordPending(t, st, refundRequested("evt_lost1", 720))
	if _, err := pool.Exec(ctx, `UPDATE inbox SET state = 'dispatched', dispatched_at = now() WHERE message_id = $1`, m.ID); err != nil {
		t.Fatal(err)
	}
	res, err := in.Accept(ctx, m.Raw, "quarantine-retry")
	if err != nil {
		t.Fatal(err)
	}
	wf := m.Consumer + "/" + m.ID
	if res.Status != intake.StatusStarted || tc.Starts()[wf] != 1 {
		t.Fatalf("retry of a message settled without a workflow: %s (%d starts), want started once", res.Status, tc.Starts()[wf])
	}
	if row := inboxState(t, st, m.Consumer, m.ID); row.State != store.InboxDispatched || row.WorkflowID != wf {
		t.Errorf("row after the retry: %s, workflow %q; want dispatched by %s", row.State, row.WorkflowID, wf)
	}
	// A second retry is a duplicate now: the workflow exists.
	if res, err := in.Accept(ctx, m.Raw, "quarantine-retry"); err != nil || res.Status != intake.StatusDuplicate {
		t.Errorf("second retry: %+v, %v; want duplicate", res, err)
	}
}

// slowTemporal delays every start by delay, like a Temporal frontend under
// load, and counts the starts in flight.
type slowTemporal struct {
	*testenv.FakeTemporal
	delay    time.Duration
	inFlight atomic.Int32
}

func (s *slowTemporal) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.FakeTemporal.ExecuteWorkflow(ctx, opts, wf, args...)
}

// TestSlowStartsDoNotStallTheInbox: while the dispatcher's starts hang on a
// slow Temporal, copies of the rows it claimed and new messages must still
// be recorded within the broker's ack wait: no row lock is held across a
// start, so a copy's duplicate counter never waits behind one.
func TestSlowStartsDoNotStallTheInbox(t *testing.T) {
	const (
		startDelay = 8 * time.Second
		ackWait    = 2 * time.Second
	)
	ctx := context.Background()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	tc := &slowTemporal{FakeTemporal: testenv.NewFakeTemporal(), delay: startDelay}
	in, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []*message.Message
	for i := range 4 {
		claimed = append(claimed, recordPending(t, st, placed(fmt.Sprintf("evt_slow%d", i), int64(730+i))))
	}
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: -1, Concurrency: 4, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	passDone := make(chan error, 1)
	go func() { _, err := d.DispatchPending(ctx); passDone <- err }()
	testenv.Eventually(t, 10*time.Second, "the dispatcher's starts are in flight", func() bool { return tc.inFlight.Load() == 4 })

	var wg sync.WaitGroup
	record := func(raw []byte) {
		defer wg.Done()
		rctx, cancel := context.WithTimeout(ctx, ackWait)
		defer cancel()
		began := time.Now()
		if _, err := in.Record(rctx, raw, "jetstream"); err != nil {
			t.Errorf("record %.40s… while starts hang: %v after %s, want it recorded within the ack wait %s", raw, err, time.Since(began).Round(time.Millisecond), ackWait)
		}
	}
	for i, m := range claimed {
		wg.Add(2)
		go record(m.Raw)                                                  // a copy of a claimed row
		go record(placed(fmt.Sprintf("evt_slow_new%d", i), int64(740+i))) // a new message
	}
	wg.Wait()
	if err := <-passDone; err != nil {
		t.Fatal(err)
	}
	for _, m := range claimed {
		if row := inboxState(t, st, m.Consumer, m.ID); row.State != store.InboxDispatched || row.Duplicates != 1 {
			t.Errorf("%s after the pass: %s with %d duplicates, want dispatched with 1", m.ID, row.State, row.Duplicates)
		}
	}
}

// TestUndecodableRowStaysPendingAndIsHeld: a row of a known consumer whose
// payload does not decode here (a validation rule tightened by a deploy)
// is quarantined for the operator but stays pending, is left alone for
// Hold, and is tried again after it; sending it again answers invalid,
// never duplicate.
func TestUndecodableRowStaysPendingAndIsHeld(t *testing.T) {
	ctx := context.Background()
	_, st, tc, in := newDispatchFixture(t)
	bad := []byte(`{"id": "evt_held1", "type": "order.placed", "data": {"order_id": 750, "amount": -5, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`)
	if _, err := st.InsertInbox(ctx, store.InboxEntry{Consumer: message.ConsumerOrderPlaced, MessageID: "evt_held1", Payload: bad, PayloadHash: "h", Source: "jetstream"}); err != nil {
		t.Fatal(err)
	}
	const hold = 500 * time.Millisecond
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: -1, Hold: hold, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		if _, err := d.DispatchPending(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	pass() // held: not claimed again
	if got := d.Stats().Quarantined; got != 1 {
		t.Fatalf("quarantined %d times in two passes within the hold, want 1", got)
	}
	if row := inboxState(t, st, message.ConsumerOrderPlaced, "evt_held1"); row.State != store.InboxPending {
		t.Fatalf("undecodable row is %s, want pending", row.State)
	}
	q, err := st.QuarantineList(ctx, 10)
	if err != nil || len(q) != 1 || q[0].MessageID != "evt_held1" || q[0].Source != "inbox" {
		t.Fatalf("quarantine = %+v, %v; want one inbox row for evt_held1", q, err)
	}
	time.Sleep(hold + 100*time.Millisecond)
	pass()
	if got := d.Stats().Quarantined; got != 2 {
		t.Errorf("after the hold: quarantined %d times, want 2 (claimed again)", got)
	}
	if res, err := in.Accept(ctx, q[0].Raw, "quarantine-retry"); err != nil || res.Status != intake.StatusInvalid {
		t.Errorf("retry of the undecodable message: %+v, %v; want invalid", res, err)
	}
	if len(tc.Starts()) != 0 {
		t.Errorf("starts = %v, want none", tc.Starts())
	}
}

// TestCrashedClaimIsTakenAgainAfterItsLease: a dispatcher killed between
// its claim and its mark (SIGKILL, or Postgres gone before the mark) leaves
// its rows claimed; no other dispatcher starts them during the lease, and
// the first pass after it starts each once.
func TestCrashedClaimIsTakenAgainAfterItsLease(t *testing.T) {
	ctx := context.Background()
	pool, st, tc, in := newDispatchFixture(t)
	m := recordPending(t, st, placed("evt_crash1", 760))
	// What the killed dispatcher's claim left behind.
	if _, err := pool.Exec(ctx, `UPDATE inbox SET claimed_until = now() + interval '1 second' WHERE message_id = $1`, m.ID); err != nil {
		t.Fatal(err)
	}
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: -1, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.DispatchPending(ctx); err != nil || n != 0 || len(tc.Starts()) != 0 {
		t.Fatalf("pass during the lease: %d settled, %v, starts %v; want nothing", n, err, tc.Starts())
	}
	time.Sleep(1100 * time.Millisecond)
	if n, err := d.DispatchPending(ctx); err != nil || n != 1 {
		t.Fatalf("pass after the lease: %d settled, %v; want 1", n, err)
	}
	if row := inboxState(t, st, m.Consumer, m.ID); row.State != store.InboxDispatched || tc.Starts()[row.WorkflowID] != 1 {
		t.Errorf("after the lease: %s, %d starts; want dispatched, started once", row.State, tc.Starts()[row.WorkflowID])
	}
}
