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

// TestDispatcherPacesEachRoute: with StartRate, a pass starts a route's
// pending rows at its pace from the first (at most a tenth of a second's
// worth at once), waiting for each start rather than
// leaving the backlog to later passes; another route's rows, younger than
// the backlog, start beside it, not behind it; nothing is lost.
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
	pass := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := d.DispatchPending(ctx)
		done <- err
	}()
	// While the pass runs, the orders never run ahead of the pace counted
	// from the intake's start (one start of burst), and the refunds start
	// within their own pace's first starts.
	var refundsAt time.Duration
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(50 * time.Millisecond):
		}
		orders, refunds := count()
		if allowed := int(pace*time.Since(began).Seconds()) + 1; orders > allowed {
			t.Fatalf("%s in, %d orders had started, want at most %d (the pace from the start, a burst of one)", time.Since(began).Round(time.Millisecond), orders, allowed)
		}
		if refunds == 2 && refundsAt == 0 {
			refundsAt = time.Since(pass)
		}
	}
	took := time.Since(pass)
	orders, refunds := count()
	if orders != 30 || refunds != 2 {
		t.Fatalf("the pass started %d of 30 orders and %d of 2 refunds, want all: it waits for the pace rather than leaving them", orders, refunds)
	}
	if refundsAt == 0 || refundsAt > time.Second {
		t.Fatalf("the refunds had both started %s into a pass of %s, want within a second: beside the orders' backlog, not behind it", refundsAt.Round(time.Millisecond), took.Round(time.Millisecond))
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
	// No burst on top of the pace: a tenth of a second's worth at most.
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
