package intake_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// pace is the start rate of the pacing tests' intake.
const pace = 5

// pacedIntake is an intake on a fresh database and a fake Temporal that
// paces each route's starts at pace per second.
func pacedIntake(t *testing.T) (*store.Store, *testenv.FakeTemporal, *intake.Intake) {
	t.Helper()
	st := store.New(storetest.NewPool(t))
	tc := testenv.NewFakeTemporal()
	in, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t), StartRate: pace})
	if err != nil {
		t.Fatal(err)
	}
	return st, tc, in
}

// TestDispatcherPacesEachRoute: with StartRate, a pass starts no more of a
// route's pending rows than its pace allows, leaving the rest pending;
// another route's rows, younger than the backlog, are started in the same
// pass; a later pass goes on with the backlog, and nothing is lost.
func TestDispatcherPacesEachRoute(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	st, tc, in := pacedIntake(t)
	for i := range 30 {
		recordPending(t, st, placed(fmt.Sprintf("evt_pace%02d", i), int64(900+i)))
	}
	for i := range 2 {
		recordPending(t, st, refundRequested(fmt.Sprintf("evt_pace_r%d", i), int64(900+i)))
	}
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: -1, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	count := func() (orders, refunds int) {
		for id := range tc.Starts() {
			switch {
			case strings.HasPrefix(id, "order-placed/"):
				orders++
			case strings.HasPrefix(id, "order-refund/"):
				refunds++
			}
		}
		return orders, refunds
	}
	// A worker just started has no burst to spend: its first pass starts
	// only what the pace has filled since the intake began; a second
	// later each route has a second's worth.
	if _, err := d.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	filled := int(pace*time.Since(began).Seconds()) + 1
	first, refunds := count()
	if first > filled || refunds > filled {
		t.Fatalf("the pass %s after the start started %d orders and %d refunds, want at most %d each (the pace's bucket starts empty)",
			time.Since(began).Round(time.Millisecond), first, refunds, filled)
	}
	time.Sleep(time.Second)
	if _, err := d.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	if orders, refunds := count(); orders-first > pace+1 || orders == first || refunds != 2 {
		t.Fatalf("a second later, the pass started %d more orders (%d in all) and %d refunds in all, want at most %d more orders (the pace's burst) and both refunds",
			orders-first, orders, refunds, pace+1)
	}
	pending, _, err := st.InboxCounts(ctx)
	if err != nil || pending < 30-first-pace-1 {
		t.Fatalf("pending after the first pass = %d, %v; want the rest of the backlog left pending", pending, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := d.DispatchPending(ctx); err != nil {
			t.Fatal(err)
		}
		if orders, _ := count(); orders == 30 {
			break
		}
		if time.Now().After(deadline) {
			orders, _ := count()
			t.Fatalf("%d of 30 orders started after 15s at %d/s", orders, pace)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pending, _, err := st.InboxCounts(ctx); err != nil || pending != 0 {
		t.Fatalf("pending at the end = %d, %v", pending, err)
	}
}

// TestFastPathPacesEachRoute: with StartRate, the fast path's starts of a
// route come at its pace, each message acked when recorded and none lost,
// while another route's start goes ahead of the queued ones.
func TestFastPathPacesEachRoute(t *testing.T) {
	_, tc, in := pacedIntake(t)
	p := newPath(t, in)
	s := &settled{}
	began := time.Now()
	for i := range 20 {
		if v := p.Handle(context.Background(), s.delivery(placed(fmt.Sprintf("evt_fp%02d", i), int64(950+i)), 1, false)); v.Settle != intake.SettleAck {
			t.Fatalf("message %d: %s, want acked once recorded", i, v.Settle)
		}
	}
	if v := p.Handle(context.Background(), s.delivery(refundRequested("evt_fp_r", 950), 1, false)); v.Settle != intake.SettleAck {
		t.Fatalf("refund: %s", v.Settle)
	}
	orders := func() int {
		n := 0
		for id := range tc.Starts() {
			if strings.HasPrefix(id, "order-placed/") {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 5*time.Second, "the refund's start", func() bool { return tc.Starts()["order-refund/evt_fp_r"] == 1 })
	// The pace's bucket starts empty: no burst on top of the pace.
	if n, took := orders(), time.Since(began); n >= 20 || float64(n) > pace*took.Seconds()+2 {
		t.Fatalf("when the refund started, %d orders had started %s in; want it ahead of the queued orders, which go at most at the pace's %d/s from the first, with no burst", n, took.Round(time.Millisecond), pace)
	}
	testenv.Eventually(t, 10*time.Second, "every order started at the pace", func() bool { return orders() == 20 })
}

// lines is a route's line at the providers as a test sets it.
type lines struct {
	mu    sync.Mutex
	ahead map[string]time.Duration
}

func (l *lines) Ahead(consumer string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ahead[consumer]
}

func (l *lines) set(consumer string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ahead[consumer] = d
}

// TestHeldRouteWaitsForItsLine: while a route's line at the providers runs
// further ahead than LineAhead, neither the fast path nor the Dispatcher
// starts its messages, which stay recorded and acknowledged, and another
// route's start goes meanwhile; once the line is short again, every held
// message is started and none is lost.
func TestHeldRouteWaitsForItsLine(t *testing.T) {
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	tc := testenv.NewFakeTemporal()
	ln := &lines{ahead: map[string]time.Duration{"order-placed": 3 * time.Second}}
	in, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t), Lines: ln, LineAhead: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		recordPending(t, st, placed(fmt.Sprintf("evt_held_p%d", i), int64(970+i)))
	}
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: -1, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := newPath(t, in)
	s := &settled{}
	for i := range 5 {
		if v := p.Handle(ctx, s.delivery(placed(fmt.Sprintf("evt_held%d", i), int64(960+i)), 1, false)); v.Settle != intake.SettleAck {
			t.Fatalf("message %d: %s, want acked once recorded", i, v.Settle)
		}
	}
	if v := p.Handle(ctx, s.delivery(refundRequested("evt_held_r", 960), 1, false)); v.Settle != intake.SettleAck {
		t.Fatalf("refund: %s", v.Settle)
	}
	testenv.Eventually(t, 5*time.Second, "the refund's start", func() bool { return tc.Starts()["order-refund/evt_held_r"] == 1 })
	if _, err := d.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	for id := range tc.Starts() {
		if strings.HasPrefix(id, "order-placed/") {
			t.Fatalf("%s started while its route's line ran 3s ahead", id)
		}
	}
	ln.set("order-placed", 100*time.Millisecond)
	if _, err := d.DispatchPending(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "every held order started", func() bool {
		n := 0
		for id := range tc.Starts() {
			if strings.HasPrefix(id, "order-placed/") {
				n++
			}
		}
		return n == 8
	})
}
