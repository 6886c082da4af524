package intake_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// settled records the verdicts a fake source was told to carry out.
type settled struct{ got []intake.Verdict }

func (s *settled) delivery(raw []byte, attempt int, last bool) intake.Delivery {
	return intake.Delivery{
		Raw: raw, Source: "fake", Attempt: attempt, Last: last, Position: "fake#1",
		Settle: func(_ context.Context, v intake.Verdict) error { s.got = append(s.got, v); return nil },
	}
}

func newPath(t *testing.T, in *intake.Intake) *intake.Path {
	t.Helper()
	p, err := intake.NewPath(in, intake.PathConfig{Source: "fake", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Open(ctx)
	t.Cleanup(func() { cancel(); p.Close() })
	return p
}

// TestPathSettlesEachOutcome runs the neutral path with a fake source: a
// new message is acked and started once; its copy acked and not started
// again; an undecodable one quarantined (and acked by the source); a type
// this worker does not know handed back before the last delivery and
// quarantined on it. Every verdict is settled exactly once, before Handle
// returns.
func TestPathSettlesEachOutcome(t *testing.T) {
	h := newHarness(t)
	oldRoutes, err := route.New(route.OrderPlaced())
	if err != nil {
		t.Fatal(err)
	}
	in, err := intake.New(store.New(h.db), h.tc, intake.Config{Routes: oldRoutes, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := newPath(t, in)
	ctx := context.Background()
	s := &settled{}
	cases := []struct {
		name   string
		d      intake.Delivery
		settle intake.Settlement
		status intake.Status
	}{
		{"new", s.delivery(placed("evt_p1", 1), 1, false), intake.SettleAck, intake.StatusRecorded},
		{"copy", s.delivery(placed("evt_p1", 1), 1, false), intake.SettleAck, intake.StatusRecorded},
		{"undecodable", s.delivery([]byte(`{"id":"evt_p2"`), 1, false), intake.SettleQuarantined, intake.StatusInvalid},
		{"unknown type, not last", s.delivery(refundRequested("evt_p3", 3), 1, false), intake.SettleRetry, ""},
		{"unknown type, last", s.delivery(refundRequested("evt_p3", 3), 3, true), intake.SettleQuarantined, intake.StatusInvalid},
	}
	for i, c := range cases {
		v := p.Handle(ctx, c.d)
		if v.Settle != c.settle || v.Result.Status != c.status || len(s.got) != i+1 || s.got[i].Settle != c.settle {
			t.Errorf("%s: verdict %s (%s, %v), %d settled; want %s (%s)", c.name, v.Settle, v.Result.Status, v.Cause, len(s.got), c.settle, c.status)
		}
	}
	if v := s.got[3]; v.Delay <= 0 {
		t.Errorf("a retry from a broker without ack wait has delay %s; want the backoff's first entry", v.Delay)
	}
	testenv.Eventually(t, 10*time.Second, "the new message's fast start", func() bool { return h.tc.Starts()["order-placed/evt_p1"] == 1 })
	st := p.Stats()
	if st.Delivered != 5 || st.Recorded != 1 || st.Duplicates != 1 || st.Invalid != 2 || st.Retries != 1 || st.Started != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestPathNeverAcksWhatPostgresDidNotTake closes the intake's pool (Postgres
// gone): a delivery is handed back with the rest of its ack wait as delay;
// on its last delivery the quarantine is retried, the broker kept waiting
// (KeepAlive), and when the source shuts down it is handed back, never
// acked.
func TestPathNeverAcksWhatPostgresDidNotTake(t *testing.T) {
	pool := storetest.NewPool(t)
	in, err := intake.New(store.New(pool), testenv.NewFakeTemporal(), intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	p := newPath(t, in)
	pool.Close()
	s := &settled{}
	d := s.delivery(placed("evt_down", 9), 2, false)
	d.AckWait = time.Minute
	v := p.Handle(context.Background(), d)
	if v.Settle != intake.SettleRetry || v.Delay <= 50*time.Second || v.Delay > time.Minute || v.Cause == nil {
		t.Fatalf("verdict %+v; want a retry at the end of the ack wait", v)
	}
	var kept atomic.Int32
	last := s.delivery(placed("evt_down", 9), 5, true)
	last.KeepAlive = func() { kept.Add(1) }
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	v = p.Handle(ctx, last)
	if v.Settle != intake.SettleRetry || kept.Load() < 1 || !strings.Contains(v.Cause.Error(), "closed pool") {
		t.Fatalf("last delivery with Postgres down: verdict %s (%v), kept alive %d times; want a retry after keeping it alive", v.Settle, v.Cause, kept.Load())
	}
	for _, got := range s.got {
		if got.Settle != intake.SettleRetry {
			t.Errorf("settled %s with Postgres down", got.Settle)
		}
	}
}

// TestOneRouteBacklogWaitsInTheBroker: a source carrying one route
// (PathConfig.OneRoute) whose route is paced (2 starts a second, one
// starter, so its lane takes 2) lets a backlog of 12 that comes at
// once into the inbox about as fast as the route starts, not all at once:
// the rest wait before their insert, kept alive (KeepAlive, the ack wait
// running again from then). Every message is recorded, acked and started
// in the end. The same deliveries on a Path without OneRoute all enter at
// once.
func TestOneRouteBacklogWaitsInTheBroker(t *testing.T) {
	for _, oneRoute := range []bool{true, false} {
		t.Run(fmt.Sprintf("OneRoute=%v", oneRoute), func(t *testing.T) {
			db := storetest.NewPool(t)
			tc := testenv.NewFakeTemporal()
			in, err := intake.New(store.New(db), tc, intake.Config{StartRate: 2, Logger: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			p, err := intake.NewPath(in, intake.PathConfig{Source: "fake", Starters: 1, OneRoute: oneRoute, Logger: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			p.Open(ctx)
			t.Cleanup(func() { cancel(); p.Close() })

			const n = 12
			var kept, acked atomic.Int64
			var wg sync.WaitGroup
			for i := range n {
				d := intake.Delivery{
					Raw: placed(fmt.Sprintf("evt_or%02d", i), int64(600+i)), Source: "fake", Attempt: 1, Position: fmt.Sprintf("fake#%d", i),
					AckWait:   10 * time.Second,
					KeepAlive: func() { kept.Add(1) },
					Settle: func(_ context.Context, v intake.Verdict) error {
						if v.Settle == intake.SettleAck {
							acked.Add(1)
						}
						return nil
					},
				}
				wg.Go(func() { p.Handle(ctx, d) })
			}
			rows := func() (c int) {
				if err := db.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE consumer = 'order-placed'`).Scan(&c); err != nil {
					t.Fatal(err)
				}
				return c
			}
			time.Sleep(400 * time.Millisecond)
			early := rows()
			if oneRoute && (early > 6 || p.Stats().Waited < n-6 || kept.Load() < n-6) {
				t.Fatalf("after 400ms: %d of %d in the inbox, %d waited, %d kept alive; want at most 6 in (2 in the lane, 1 started or waiting for its pace, a start's chunk) and the rest waiting, kept alive",
					early, n, p.Stats().Waited, kept.Load())
			}
			if !oneRoute && (early != n || p.Stats().Waited != 0) {
				t.Fatalf("without OneRoute: %d of %d in the inbox after 400ms, %d waited; want all in at once", early, n, p.Stats().Waited)
			}
			wg.Wait()
			if rows() != n || acked.Load() != n {
				t.Fatalf("%d in the inbox, %d acked; want %d each", rows(), acked.Load(), n)
			}
			testenv.Eventually(t, 20*time.Second, "every message started", func() bool { return len(tc.Starts()) == n })
		})
	}
}
