package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// acquireGate watches the connections of the intake's pool. It holds the
// first acquirers back until need connections are in use at once or 10s
// passed, and delays every acquire by delay. While refuse is set, every
// acquire fails, as with Postgres out of reach.
type acquireGate struct {
	need   int
	delay  time.Duration
	refuse atomic.Bool

	mu    sync.Mutex
	inUse int
	open  chan struct{}
	once  sync.Once
}

func newGate(need int, delay time.Duration) *acquireGate {
	return &acquireGate{need: need, delay: delay, open: make(chan struct{})}
}

func (g *acquireGate) prepare(context.Context, *pgx.Conn) (bool, error) {
	if g.refuse.Load() {
		return true, errors.New("postgres out of reach (the test's gate)")
	}
	g.mu.Lock()
	g.inUse++
	if g.inUse >= g.need {
		g.once.Do(func() { close(g.open) })
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-time.After(10 * time.Second): // never that many at once: let them through
		g.once.Do(func() { close(g.open) })
	}
	time.Sleep(g.delay)
	return true, nil
}

func (g *acquireGate) release(*pgx.Conn) bool {
	g.mu.Lock()
	g.inUse--
	g.mu.Unlock()
	return true
}

// inboxGroups is a pgx tracer that keeps the largest number of messages
// one inbox transaction (a pipelined batch) recorded: the store groups
// the InsertInbox calls that arrive while another one's transaction runs,
// so a group of n shows n deliveries being recorded at once.
type inboxGroups struct {
	mu      sync.Mutex
	largest int
}

func (g *inboxGroups) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (g *inboxGroups) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (g *inboxGroups) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	n := 0
	for _, q := range d.Batch.QueuedQueries {
		// The group's statement takes the message IDs as its second array.
		if strings.Contains(q.SQL, "INSERT INTO inbox") && len(q.Arguments) > 1 {
			ids, _ := q.Arguments[1].([]string)
			n += len(ids)
		}
	}
	g.mu.Lock()
	g.largest = max(g.largest, n)
	g.mu.Unlock()
	return ctx
}
func (g *inboxGroups) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (g *inboxGroups) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (g *inboxGroups) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.largest
}

// harness is an Intake on a fresh database, with a fake Temporal, and a
// JetStream stream of its own.
type harness struct {
	in     *intake.Intake
	tc     *testenv.FakeTemporal
	j      *testenv.JetStream
	db     *pgxpool.Pool // for the test's own queries, outside the gate
	groups *inboxGroups  // the intake pool's largest inbox transaction
}

func newHarness(tb testing.TB, gate *acquireGate) *harness {
	tb.Helper()
	return newHarnessAt(tb, gate, testenv.NATSURL(), testenv.JetStreamOptions{})
}

// newHarnessAt is newHarness on the NATS server at natsURL.
func newHarnessAt(tb testing.TB, gate *acquireGate, natsURL string, o testenv.JetStreamOptions) *harness {
	tb.Helper()
	ctx := context.Background()
	url := storetest.NewDatabase(tb)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	pc.MaxConns = 32 // handlers, starters and a dispatcher
	if gate != nil {
		pc.PrepareConn, pc.AfterRelease = gate.prepare, gate.release
	}
	groups := &inboxGroups{}
	pc.ConnConfig.Tracer = groups
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	tc := testenv.NewFakeTemporal()
	in, err := intake.New(store.New(pool), tc, intake.Config{Logger: testenv.Logger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	return &harness{in: in, tc: tc, j: testenv.NewJetStreamAt(tb, natsURL, o), db: db, groups: groups}
}

func orderMsg(id string, orderID int) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`, id, orderID)
}

// publishCopies publishes unique messages, each copies times in a row and
// without Nats-Msg-Id, so the broker keeps every copy, and returns their IDs.
func (h *harness) publishCopies(tb testing.TB, prefix string, unique, copies int) []string {
	tb.Helper()
	ids := make([]string, unique)
	for i := range unique {
		ids[i] = fmt.Sprintf("%s_%03d", prefix, i)
		raw := orderMsg(ids[i], 1000+i)
		for range copies {
			h.j.Publish(tb, raw, "")
		}
	}
	return ids
}

// run runs c until the returned stop is called; stop fails the test when
// Run does not return.
func run(tb testing.TB, c interface{ Run(context.Context) error }) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				tb.Fatalf("Run did not return within 30s of the shutdown")
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

func (h *harness) consumerInfo(tb testing.TB, durable string) (ackPending int, pending uint64, redelivered int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := h.j.JS.Consumer(ctx, h.j.Stream, durable)
	if err != nil {
		tb.Fatal(err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return ci.NumAckPending, ci.NumPending, ci.NumRedelivered
}

func (h *harness) count(tb testing.TB, q string, args ...any) int64 {
	tb.Helper()
	var n int64
	if err := h.db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestConsumerSettlesCopiesConcurrently publishes 200 messages three times
// each, copies back to back so that they are settled at the same moment,
// into a consumer with several handlers. Every copy must be recognised by
// the inbox and acked, each message must have one row and one workflow, and
// the handlers must really have worked at once: their inbox inserts then
// share transactions (the store's group commit), which handlers taking
// turns would never do.
func TestConsumerSettlesCopiesConcurrently(t *testing.T) {
	const unique, copies, handlers = 200, 3, 8
	h := newHarness(t, nil)
	ids := h.publishCopies(t, "evt_conc", unique, copies)

	cfg := h.j.ConsumerConfig(t, 30*time.Second, 5) // no redelivery within the test
	cfg.Handlers, cfg.FetchBatch = handlers, 50
	cons, err := jetstream.NewConsumer(context.Background(), h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.Eventually(t, 60*time.Second, "every copy settled and acked", func() bool {
		s := cons.Stats()
		ackPending, pending, _ := h.consumerInfo(t, cfg.Durable)
		return s.Recorded+s.Duplicates == unique*copies && ackPending == 0 && pending == 0
	})
	if n := h.groups.max(); n < 3 {
		t.Errorf("at most %d deliveries recorded in one inbox transaction: the %d handlers did not settle them at once", n, handlers)
	} else {
		t.Logf("up to %d deliveries recorded in one inbox transaction", n)
	}

	// Starts the fast path dropped (its queue full) are the dispatcher's.
	disp, err := intake.NewDispatcher(h.in, intake.DispatcherConfig{MinAge: -1, Interval: 50 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stopDisp := run(t, disp)
	testenv.Eventually(t, 30*time.Second, "every inbox row dispatched", func() bool {
		return h.count(t, `SELECT count(*) FROM inbox WHERE state <> 'dispatched'`) == 0
	})
	stopDisp()
	stop()

	s := cons.Stats()
	want := intake.SourceStats{Delivered: unique * copies, Recorded: unique, Duplicates: unique * (copies - 1), Started: s.Started}
	if s != want {
		t.Errorf("consumer stats = %+v, want %+v", s, want)
	}
	if ackPending, pending, redelivered := h.consumerInfo(t, cfg.Durable); ackPending != 0 || pending != 0 || redelivered != 0 {
		t.Errorf("broker: %d deliveries not acked, %d not delivered, %d redelivered; want none", ackPending, pending, redelivered)
	}
	if n := h.count(t, `SELECT count(*) FROM inbox WHERE consumer = $1 AND message_id = ANY($2)`, message.ConsumerOrderPlaced, ids); n != unique {
		t.Errorf("inbox has rows for %d of the %d messages", n, unique)
	}
	if n := h.count(t, `SELECT count(*) FROM inbox`); n != unique {
		t.Errorf("inbox rows = %d, want %d", n, unique)
	}
	if n := h.count(t, `SELECT count(*) FROM inbox WHERE duplicates <> $1`, copies-1); n != 0 {
		t.Errorf("%d inbox rows do not count %d copies", n, copies-1)
	}
	if n := h.count(t, `SELECT coalesce(sum(duplicates), 0) FROM inbox`); n != s.Duplicates {
		t.Errorf("inbox duplicates = %d, consumer counted %d", n, s.Duplicates)
	}
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d messages quarantined, want none", n)
	}
	started := h.tc.Starts()
	if len(started) != unique {
		t.Errorf("workflows started for %d messages, want %d", len(started), unique)
	}
	for id, n := range started {
		if n != 1 {
			t.Errorf("workflow %s started %d times", id, n)
		}
	}
	if got := s.Started + disp.Stats().Started; got != unique {
		t.Errorf("fast path started %d and the dispatcher %d workflows; want %d in all", s.Started, disp.Stats().Started, unique)
	}
}

// TestConsumerShutdownSettlesFetched stops a consumer whose handlers are
// slow while it is in the middle of the stream: every message it fetched
// must be settled (recorded and acked) before Run returns, none left to its
// ack wait, and the rest must still be in the stream.
func TestConsumerShutdownSettlesFetched(t *testing.T) {
	const unique, copies = 200, 3
	h := newHarness(t, newGate(1, 5*time.Millisecond))
	h.publishCopies(t, "evt_stop", unique, copies)

	cfg := h.j.ConsumerConfig(t, 30*time.Second, 5)
	cfg.Handlers, cfg.FetchBatch = 4, 50
	cons, err := jetstream.NewConsumer(context.Background(), h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "the first deliveries", func() bool { return cons.Stats().Delivered >= 20 })
	stop()

	s := cons.Stats()
	if s.Delivered >= unique*copies {
		t.Fatalf("all %d deliveries were settled before the shutdown; the test needs one in the middle", s.Delivered)
	}
	if s.Recorded+s.Duplicates != s.Delivered || s.Retries != 0 || s.Invalid+s.PayloadMismatches+s.MaxDelivered != 0 {
		t.Errorf("stats after shutdown = %+v: every delivery should be recorded or recognised", s)
	}
	// The acks were sent before Run returned; the server applies them
	// asynchronously, so a reading taken at once may still count the last
	// few. Well inside the 30 s ack wait they must all be in, and nothing
	// redelivered: none was left to the ack wait.
	var (
		ackPending, redelivered int
		pending                 uint64
	)
	deadline := time.Now().Add(5 * time.Second)
	for {
		ackPending, pending, redelivered = h.consumerInfo(t, cfg.Durable)
		if ackPending == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ackPending != 0 || redelivered != 0 {
		t.Errorf("5s after Run returned: %d deliveries not acked, %d redelivered; want none", ackPending, redelivered)
	}
	if pending+uint64(s.Delivered) != uint64(unique*copies) { //nolint:gosec // counts, never negative
		t.Errorf("%d delivered + %d still in the stream != %d published", s.Delivered, pending, unique*copies)
	}
	if n := h.count(t, `SELECT count(*) FROM inbox`); n != s.Recorded {
		t.Errorf("inbox rows = %d, consumer recorded %d", n, s.Recorded)
	}
	if n := h.count(t, `SELECT coalesce(sum(duplicates), 0) FROM inbox`); n != s.Duplicates {
		t.Errorf("inbox duplicates = %d, consumer counted %d", n, s.Duplicates)
	}
}

// BenchmarkConsumerCopies measures duplicate suppression: b.N copies of 100
// messages already recorded and dispatched, settled by a consumer with 1 or
// DefaultHandlers handlers. Run it with a fixed count, e.g.
// go test ./internal/intake/ -run '^$' -bench ConsumerCopies -benchtime 3000x
func BenchmarkConsumerCopies(b *testing.B) {
	for _, handlers := range []int{1, jetstream.DefaultHandlers} {
		b.Run(fmt.Sprintf("handlers=%d", handlers), func(b *testing.B) {
			h := newHarness(b, nil)
			ctx := context.Background()
			raws := make([][]byte, 100)
			for i := range raws {
				raws[i] = orderMsg(fmt.Sprintf("evt_bench_%03d", i), 1+i)
				rec, err := h.in.Record(ctx, raws[i], "bench")
				if err != nil || rec.Message == nil {
					b.Fatalf("record: %+v, %v", rec, err)
				}
				if _, err := h.in.Dispatch(ctx, rec.Message); err != nil {
					b.Fatal(err)
				}
			}
			subject, err := jetstream.PublishSubject(h.j.Subject, "order.placed")
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if _, err := h.j.JS.PublishAsync(subject, raws[i%len(raws)]); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-h.j.JS.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish did not complete")
			}
			cfg := h.j.ConsumerConfig(b, 30*time.Second, 5)
			cfg.Handlers = handlers
			cons, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			stop := run(b, cons)
			for cons.Stats().Duplicates < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			if s := cons.Stats(); s.Recorded != 0 || s.Delivered != int64(b.N) {
				b.Fatalf("stats = %+v", s)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "copies/s")
		})
	}
}
