package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// observer counts what a Limiter reports.
type observer struct {
	mu        sync.Mutex
	waits     int
	limited   []string
	fallbacks int
	deferred  int
}

func (o *observer) RateWaited(string, string, time.Duration) { o.mu.Lock(); o.waits++; o.mu.Unlock() }
func (o *observer) RateLimited(_, _, reason string, _ time.Duration) {
	o.mu.Lock()
	o.limited = append(o.limited, reason)
	o.mu.Unlock()
}
func (o *observer) RateFallback(string) { o.mu.Lock(); o.fallbacks++; o.mu.Unlock() }
func (o *observer) RateDeferred(string, string, time.Duration) {
	o.mu.Lock()
	o.deferred++
	o.mu.Unlock()
}

func newLimiter(t *testing.T, b ratelimit.Backend, cfg ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSharedByWorkers: two limiters on one database (two worker processes)
// together send no faster than the one limit: n requests take at least
// (n - burst) / rate, and no second at the server sees more than rate +
// burst of them.
func TestSharedByWorkers(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	var mu sync.Mutex
	var seen []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		seen = append(seen, time.Now())
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	const rate, burst, n = 40.0, 4, 80
	cfg := ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 1000}, Endpoint: ratelimit.Rate{PerSecond: rate, Burst: burst}}
	clients := []*http.Client{
		{Transport: newLimiter(t, st, cfg).Transport(nil)},
		{Transport: newLimiter(t, st, cfg).Transport(nil)},
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := clients[i%2].Post(srv.URL+"/v1/payment_intents", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if least := time.Duration(float64(n-burst) / rate * float64(time.Second)); elapsed < least*9/10 {
		t.Fatalf("%d requests took %s; the shared limit of %v/s allows no less than %s", n, elapsed, rate, least)
	}
	slices.SortFunc(seen, func(a, b time.Time) int { return a.Compare(b) })
	for i := range seen {
		j := i
		for j < len(seen) && seen[j].Sub(seen[i]) < time.Second {
			j++
		}
		if j-i > int(rate)+burst+2 { // +2: the server's clock is not the database's
			t.Fatalf("%d requests within one second from %s; the limit allows %d", j-i, seen[i].Format(time.StampMilli), int(rate)+burst)
		}
	}
	t.Logf("%d requests through 2 limiters in %s (limit %v/s, burst %d)", n, elapsed, rate, burst)
}

// TestTooManyRequestsPausesEveryWorker: a 429 with Retry-After is waited
// out and sent again with the same body, its caller sees the 200, the
// Observer counts it, and the other worker's next request waits too.
func TestTooManyRequestsPausesEveryWorker(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	var calls atomic.Int32
	var bodies sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store(calls.Load(), string(b))
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Stripe-Rate-Limited-Reason", "endpoint-rate")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}))
	t.Cleanup(srv.Close)
	cfg := ratelimit.Config{Provider: "stripe", Endpoint: ratelimit.Rate{PerSecond: 100, Burst: 10}}
	var o1, o2 observer
	cfg.Observer = &o1
	a := &http.Client{Transport: newLimiter(t, st, cfg).Transport(nil)}
	cfg.Observer = &o2
	b := &http.Client{Transport: newLimiter(t, st, cfg).Transport(nil)}

	start := time.Now()
	resp, err := a.Post(srv.URL+"/v1/payment_intents", "application/x-www-form-urlencoded", strings.NewReader("amount=1500"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("status %d after %s; want 200 after the 1s pause", resp.StatusCode, time.Since(start))
	}
	if b0, _ := bodies.Load(int32(0)); b0 != "amount=1500" {
		t.Errorf("first body %q", b0)
	}
	if b1, _ := bodies.Load(int32(1)); b1 != "amount=1500" {
		t.Errorf("resent body %q, want the same", b1)
	}
	if len(o1.limited) != 1 || o1.limited[0] != "endpoint-rate" {
		t.Errorf("429s observed %v, want [endpoint-rate]", o1.limited)
	}
	// The pause is in Postgres: the other worker, which never saw the 429,
	// waits too. Pause it again and time b's request.
	st2 := newLimiter(t, st, cfg)
	h := http.Header{"Retry-After": {"1"}}
	st2.Throttled(context.Background(), ratelimit.Endpoint(http.MethodPost, "/v1/payment_intents"), h)
	start = time.Now()
	resp, err = b.Post(srv.URL+"/v1/payment_intents", "text/plain", strings.NewReader("y"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if waited := time.Since(start); waited < 800*time.Millisecond {
		t.Fatalf("the other worker's request went after %s, want it held by the pause (1s)", waited)
	}
	if o2.waits == 0 {
		t.Error("the other worker's wait was not observed")
	}
}

// TestGivesUpAfterMaxRetries: a provider that keeps answering 429 gets
// MaxRetries+1 requests and the caller the last 429.
func TestGivesUpAfterMaxRetries(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: newLimiter(t, st, ratelimit.Config{Provider: "sendgrid", Global: ratelimit.Rate{PerSecond: 100}, MaxRetries: 2}).Transport(nil)}
	resp, err := c.Post(srv.URL+"/v3/mail/send", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || calls.Load() != 3 {
		t.Fatalf("status %d after %d calls; want 429 after 3", resp.StatusCode, calls.Load())
	}
}

// downBackend is Postgres not answering.
type downBackend struct{}

func (downBackend) ReserveRate(context.Context, store.Reservation) (store.Reserved, error) {
	return store.Reserved{}, errors.New("connection refused")
}
func (downBackend) PauseRate(context.Context, []string, time.Duration) error {
	return errors.New("connection refused")
}

// TestFallsBackWhenPostgresIsDown: requests still go, paced by the
// process's own bucket, and the fallback is counted.
func TestFallsBackWhenPostgresIsDown(t *testing.T) {
	var o observer
	l := newLimiter(t, downBackend{}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 20, Burst: 1}, Observer: &o})
	start := time.Now()
	for range 5 {
		if err := l.Wait(context.Background(), "POST /v1/refunds"); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 180*time.Millisecond {
		t.Fatalf("5 requests at 20/s took %s, want ≥ 200ms", el)
	}
	if o.fallbacks != 5 {
		t.Errorf("fallbacks = %d, want 5", o.fallbacks)
	}
}

// TestWaitEndsWithContext: a request whose context ends while it waits is
// not sent, and says so.
func TestWaitEndsWithContext(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 1, Burst: 1}})
	if err := l.Wait(context.Background(), "POST /v1/refunds"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := l.Wait(ctx, "POST /v1/refunds")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("err = %v, want not sent, canceled", err)
	}
}

// TestDeferredTakesNoSlot: a request whose slot is further away than
// MaxWait (or than its deadline allows) is sent back with a
// *DeferredError, and takes no slot: the next request's wait is unchanged.
// (No express lane: a request of a flow without a backlog would take it.)
func TestDeferredTakesNoSlot(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	var o observer
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 2, Burst: 1}, MaxWait: 300 * time.Millisecond, ExpressShare: -1, Observer: &o})
	ep := "POST /v1/refunds"
	if err := l.Wait(context.Background(), ep); err != nil { // the burst
		t.Fatal(err)
	}
	for range 3 {
		err := l.Wait(context.Background(), ep) // 500ms away: beyond MaxWait
		d, ok := ratelimit.Deferred(err)
		if !ok || d <= 0 {
			t.Fatalf("err = %v, want a *DeferredError with a retry-after", err)
		}
	}
	if o.deferred != 3 {
		t.Errorf("deferred = %d, want 3", o.deferred)
	}
	// A deadline closer than the slot defers too.
	ctx, cancel := context.WithTimeout(context.Background(), 2100*time.Millisecond)
	defer cancel()
	l2 := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 2, Burst: 1}, ExpressShare: -1})
	if _, ok := ratelimit.Deferred(l2.Wait(ctx, ep)); !ok {
		t.Fatal("a slot past the deadline less the send margin was taken")
	}
	time.Sleep(600 * time.Millisecond)
	start := time.Now()
	if err := l.Wait(context.Background(), ep); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("after the deferrals: %v after %s; they took slots", err, time.Since(start))
	}
}

func TestEndpoint(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/v1/payment_intents", "POST /v1/payment_intents"},
		{"POST", "/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa/confirm", "POST /v1/payment_intents/{id}/confirm"},
		{"GET", "/v1/payment_intents/search", "GET /v1/payment_intents/search"},
		{"GET", "/v1/refunds/re_YDcZgF00000000000002", "GET /v1/refunds/{id}"},
		{"POST", "/v3/mail/send", "POST /v3/mail/send"},
	} {
		if got := ratelimit.Endpoint(c.method, c.path); got != c.want {
			t.Errorf("Endpoint(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	st := downBackend{}
	for _, cfg := range []ratelimit.Config{
		{},
		{Provider: "stripe", Global: ratelimit.Rate{PerSecond: -1}},
		{Provider: "stripe", Endpoints: map[string]ratelimit.Rate{"GET /x": {Burst: -2}}},
	} {
		if _, err := ratelimit.New(st, cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestFlowsTakeTurns: while one flow has a backlog reserved at a bucket
// (60 requests at 20/s: three seconds of it), another flow's request goes
// within about an express interval (200ms at a share of 0.25), not behind
// the backlog; the backlog still goes at the limit, and the express slots
// come on top of it only while its slots were reserved ahead.
func TestFlowsTakeTurns(t *testing.T) {
	pool := storetest.NewPool(t)
	st := store.New(pool)
	const rate, n = 20.0, 60
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Endpoint: ratelimit.Rate{PerSecond: rate, Burst: 1}, MaxWait: 10 * time.Second})
	ep := "POST /v1/payment_intents"
	backlog := ratelimit.WithFlow(context.Background(), "order-placed")
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := l.Wait(backlog, ep); err != nil {
				t.Error(err)
			}
		})
	}
	// The backlog reserved: its last slot is about n/rate ahead. (A fixed
	// pause was not enough on a loaded 2-core CI machine: the other flow's
	// first request then waited 726 ms for the backlog's reservations
	// still being made, not behind its slots.)
	time.Sleep(500 * time.Millisecond)
	testenv.Eventually(t, 10*time.Second, "the backlog's reservations", func() bool {
		var tat time.Time
		err := pool.QueryRow(context.Background(), `SELECT coalesce(max(tat), 'epoch') FROM rate_limits`).Scan(&tat)
		return err == nil && tat.After(start.Add(time.Duration(float64(n-2)/rate*float64(time.Second))))
	})
	other := ratelimit.WithFlow(context.Background(), "order-refund")
	var waits []time.Duration
	for range 5 {
		t0 := time.Now()
		if err := l.Wait(other, ep); err != nil {
			t.Fatal(err)
		}
		waits = append(waits, time.Since(t0))
		time.Sleep(250 * time.Millisecond)
	}
	// Behind the backlog it would be seconds; the database's round trips
	// and a busy machine add a little to the express interval.
	if worst := slices.Max(waits); worst > 400*time.Millisecond {
		t.Errorf("the other flow's requests waited %v behind a backlog of %d; want at most about an express interval (200ms)", waits, n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if least := time.Duration(float64(n-1) / rate * float64(time.Second)); elapsed < least*9/10 {
		t.Errorf("the backlog of %d took %s; the limit of %v/s allows no less than %s", n, elapsed, rate, least)
	}
	t.Logf("other flow's waits %v; the backlog's %d requests in %s", waits, n, elapsed.Round(time.Millisecond))
}

// TestExpressNeverLaterThanTheLine: a flow sending one request at a time
// at half a bucket's rate has no line there, and neither has a quiet
// flow beside it: both go at once. Before, each took the express lane
// because it had no slot to come; the busy flow's express slots (at twice
// the lane's share) made it wait up to an express interval (200ms here)
// for its own, and the quiet flow behind them, though the bucket had room.
func TestExpressNeverLaterThanTheLine(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	const rate = 20.0
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: rate, Burst: 1}, MaxWait: 10 * time.Second})
	ctx, stop := context.WithCancel(context.Background())
	var busy []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		flow := ratelimit.WithFlow(ctx, "order-placed")
		for ctx.Err() == nil {
			t0 := time.Now()
			if err := l.Wait(flow, "POST /v1/payment_intents"); err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			busy = append(busy, time.Since(t0))
			time.Sleep(time.Second / (rate / 2))
		}
	})
	time.Sleep(time.Second)
	quiet := ratelimit.WithFlow(context.Background(), "order-refund")
	var waits []time.Duration
	for range 12 {
		t0 := time.Now()
		if err := l.Wait(quiet, "POST /v1/refunds"); err != nil {
			t.Fatal(err)
		}
		waits = append(waits, time.Since(t0))
		time.Sleep(250 * time.Millisecond)
	}
	stop()
	wg.Wait()
	// A reservation is a round trip of about a millisecond; a slot behind
	// express slots is tens of them. A slot now and then waits for the
	// other flow's last (50ms), so the medians are compared.
	slices.Sort(waits)
	slices.Sort(busy)
	if median := waits[len(waits)/2]; median > 25*time.Millisecond {
		t.Errorf("beside a flow at half the bucket's rate, the quiet flow's requests waited %v (median %s); the bucket had room: want about a round trip", waits, median)
	}
	if median := busy[len(busy)/2]; median > 25*time.Millisecond {
		t.Errorf("a flow at half the bucket's rate waited a median of %s over %d requests; the bucket had room: want about a round trip", median, len(busy))
	}
	t.Logf("quiet flow's waits %v; the other flow's median %s over %d requests", waits, busy[len(busy)/2], len(busy))
}

// TestExpressLaneKeepsTheRate: a flow alone asking faster than the
// express share soon has slots to come, and from then on waits in the
// line: n requests still take (n - 1) / rate, the express slots having
// pushed the line back.
func TestExpressLaneKeepsTheRate(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	const rate, n = 50.0, 100
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: rate, Burst: 1}, MaxWait: 10 * time.Second})
	ctx := ratelimit.WithFlow(context.Background(), "order-placed")
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := l.Wait(ctx, "POST /v1/refunds"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ideal := time.Duration(float64(n-1) / rate * float64(time.Second))
	if elapsed := time.Since(start); elapsed > ideal*13/10 || elapsed < ideal*9/10 {
		t.Errorf("%d requests of one flow took %s; at %v/s they take %s", n, elapsed, rate, ideal)
	}
}

// TestExpressWaitsNoLongerThanMaxWait: at a slow bucket an express
// interval is long (16s at 0.25/s). With flow a's backlog in the line
// (two slots, the second 4s away), flow b passes it in the express lane at
// once; flow c would then wait 8s in the line or 16s for the lane, longer
// than its MaxWait: it is sent back at once instead.
func TestExpressWaitsNoLongerThanMaxWait(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	rate := ratelimit.Rate{PerSecond: 0.25, Burst: 1}
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: rate, MaxWait: 100 * time.Millisecond})
	backlog := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: rate, MaxWait: 10 * time.Second})
	a, cancel := context.WithCancel(ratelimit.WithFlow(context.Background(), "a"))
	defer cancel()
	if err := backlog.Wait(a, "POST /v1/refunds"); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- backlog.Wait(a, "POST /v1/refunds") }()
	time.Sleep(200 * time.Millisecond) // a's second slot is reserved
	start := time.Now()
	if err := l.Wait(ratelimit.WithFlow(context.Background(), "b"), "POST /v1/refunds"); err != nil || time.Since(start) > time.Second {
		t.Fatalf("flow b: err = %v after %s; want sent at once in the express lane", err, time.Since(start))
	}
	start = time.Now()
	err := l.Wait(ratelimit.WithFlow(context.Background(), "c"), "POST /v1/refunds")
	if _, ok := ratelimit.Deferred(err); !ok || time.Since(start) > time.Second {
		t.Fatalf("flow c: err = %v after %s; want sent back at once", err, time.Since(start))
	}
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Errorf("flow a's second request, canceled while it waited: err = %v", err)
	}
}

// TestWithMaxWaitSendsBackSooner: a request whose context caps its wait
// (a local attempt's, ratelimit.WithMaxWait) is sent back at once, taking
// no slot, where one without the cap waits for the same slot.
func TestWithMaxWaitSendsBackSooner(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	l := newLimiter(t, st, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 4, Burst: 1}, ExpressShare: -1})
	ep := "POST /v1/payment_intents"
	if err := l.Wait(context.Background(), ep); err != nil { // the burst
		t.Fatal(err)
	}
	start := time.Now()
	if d, ok := ratelimit.Deferred(l.Wait(ratelimit.WithMaxWait(context.Background(), 50*time.Millisecond), ep)); !ok || d <= 0 || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("capped at 50ms with the slot 250ms away: deferred %v (retry after %s) after %s; want sent back at once", ok, d, time.Since(start))
	}
	start = time.Now()
	if err := l.Wait(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond || waited > time.Second {
		t.Errorf("uncapped: waited %s, want the next slot (about 250ms): the capped request took none", waited)
	}
}

// reserving counts the reservations a backend has answered.
type reserving struct {
	ratelimit.Backend
	n atomic.Int32
}

func (r *reserving) ReserveRate(ctx context.Context, res store.Reservation) (store.Reserved, error) {
	defer r.n.Add(1)
	return r.Backend.ReserveRate(ctx, res)
}

// TestLinesSeeTheSharedLine: a flow's line as one worker's Lines reads it
// from its own request includes what another worker reserved before it:
// after the other's 19 requests at 5/s, this worker's next slot is one
// interval (200 ms) past the other's last, whichever limiter took them and
// however long the machine took to reserve them; another flow's line stays
// empty; a deferred request reads the line too; and the line shortens as
// time passes.
func TestLinesSeeTheSharedLine(t *testing.T) {
	st := store.New(storetest.NewPool(t))
	ep := "POST /v1/payment_intents"
	cfg := ratelimit.Config{Provider: "stripe", Endpoint: ratelimit.Rate{PerSecond: 5, Burst: 1}, MaxWait: 10 * time.Second, ExpressShare: -1}
	theirs := ratelimit.NewLines()
	cfg.Lines = theirs
	counted := &reserving{Backend: st}
	other := newLimiter(t, counted, cfg)
	mine := ratelimit.NewLines()
	cfg.Lines = mine
	l := newLimiter(t, st, cfg)
	flow := ratelimit.WithFlow(context.Background(), "order-placed")
	var wg sync.WaitGroup
	for range 19 {
		wg.Go(func() { _ = other.Wait(flow, ep) })
	}
	testenv.Eventually(t, 10*time.Second, "the other worker's 19 reservations", func() bool { return counted.n.Load() == 19 })
	if d := mine.Ahead("order-placed"); d != 0 {
		t.Fatalf("ahead %s before this worker's first request, want 0", d)
	}
	wg.Go(func() { _ = l.Wait(flow, ep) })
	testenv.Eventually(t, 10*time.Second, "this worker's reservation", func() bool { return mine.Ahead("order-placed") > 0 })
	got, last := mine.Ahead("order-placed"), theirs.Ahead("order-placed")
	if last <= 0 {
		t.Fatalf("the other worker's line has run out (this worker's is %s ahead): reserving 19 took longer than their 3.6 s line", got)
	}
	if gap := got - last; gap < 100*time.Millisecond || gap > 400*time.Millisecond {
		t.Fatalf("ahead %s, the other worker's line %s ahead: %s past its last slot, want one interval (200ms)", got, last, gap)
	}
	if d := mine.Ahead("order-refund"); d != 0 {
		t.Fatalf("another flow's line is %s ahead, want 0", d)
	}
	time.Sleep(500 * time.Millisecond)
	if d := mine.Ahead("order-placed"); d > got-400*time.Millisecond {
		t.Fatalf("ahead %s half a second after %s: the line did not shorten", d, got)
	}
	short := ratelimit.WithMaxWait(flow, 100*time.Millisecond)
	before := mine.Ahead("order-placed")
	if _, ok := ratelimit.Deferred(l.Wait(short, ep)); !ok {
		t.Fatal("a request that would wait over a second was not sent back")
	}
	if d := mine.Ahead("order-placed"); d < before {
		t.Fatalf("ahead %s after a deferred request, was %s: the deferral did not read the line", d, before)
	}
	wg.Wait()
}

// TestFallbackHonoursAPauseWithABurst: with Postgres down, a 429's pause
// holds the process's own bucket for the whole Retry-After, as PauseRate
// does, even with a burst that lets requests run ahead of its arrival time.
func TestFallbackHonoursAPauseWithABurst(t *testing.T) {
	l := newLimiter(t, downBackend{}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 80, Burst: 80}})
	const ep = "POST /v1/refunds"
	if d := l.Throttled(context.Background(), ep, http.Header{"Retry-After": {"1"}}); d != time.Second {
		t.Fatalf("pause %s, want 1s", d)
	}
	start := time.Now()
	if err := l.Wait(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	if w := time.Since(start); w < 900*time.Millisecond {
		t.Fatalf("a request went %s after a 429 of Retry-After 1s (the fallback bucket)", w.Round(time.Millisecond))
	}
}

// TestPassedResetPausesDefaultPause: SendGrid's 429 carries no Retry-After,
// only X-RateLimit-Reset in whole seconds by its clock. A reset that has
// come by ours (its second begun, or the clocks apart) pauses DefaultPause,
// not nothing (which would spend the retries at once); one ahead pauses
// until it.
func TestPassedResetPausesDefaultPause(t *testing.T) {
	l := newLimiter(t, downBackend{}, ratelimit.Config{Provider: "sendgrid", Global: ratelimit.Rate{PerSecond: 80, Burst: 80}})
	const ep = "POST /v3/mail/send"
	now := time.Now()
	for _, tc := range []struct {
		reset    time.Time
		min, max time.Duration
	}{
		{now.Add(-2 * time.Second), time.Second, time.Second},
		{now.Truncate(time.Second), time.Second, time.Second},
		{now.Add(3 * time.Second), 2 * time.Second, 3 * time.Second},
	} {
		h := http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(tc.reset.Unix(), 10)}}
		if d := l.Throttled(context.Background(), ep, h); d < tc.min || d > tc.max {
			t.Errorf("reset %s from now: pause %s, want %s to %s", tc.reset.Sub(now).Round(time.Millisecond), d, tc.min, tc.max)
		}
	}
}

// TestHugeRetryAfterPausesMaxPause: a Retry-After past what a Duration
// holds pauses MaxPause, not nothing.
func TestHugeRetryAfterPausesMaxPause(t *testing.T) {
	l := newLimiter(t, downBackend{}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 80, Burst: 1}})
	for _, v := range []string{"1e10", "+Inf", "600"} {
		if d := l.Throttled(context.Background(), "POST /v1/refunds", http.Header{"Retry-After": {v}}); d != time.Minute {
			t.Errorf("Retry-After %s paused %s, want MaxPause 1m0s", v, d)
		}
	}
}

// TestNotSentInsideTheSendMargin: a request whose deadline is nearer than
// SendMargin takes no slot and is not sent (a *deadline.TooLateError),
// through Postgres as through the fallback.
func TestNotSentInsideTheSendMargin(t *testing.T) {
	for name, b := range map[string]ratelimit.Backend{"postgres": store.New(storetest.NewPool(t)), "fallback": downBackend{}} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, b, ratelimit.Config{Provider: "stripe-" + name, Global: ratelimit.Rate{PerSecond: 10, Burst: 1}, SendMargin: 2 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if err := l.Wait(ctx, "POST /v1/refunds"); !deadline.TooLate(err) {
				t.Fatalf("Wait with 500ms left (SendMargin 2s) = %v, want not sent (too late)", err)
			}
		})
	}
}

// slowBackend grants a slot r.MaxWait away, after lag: a reservation that
// queued on its bucket's row lock.
type slowBackend struct{ lag time.Duration }

func (b slowBackend) ReserveRate(_ context.Context, r store.Reservation) (store.Reserved, error) {
	time.Sleep(b.lag)
	return store.Reserved{OK: true, Wait: r.MaxWait}, nil
}
func (slowBackend) PauseRate(context.Context, []string, time.Duration) error { return nil }

// TestReservationTimeCountsAgainstTheMargin: the reservation's own time and
// the wait together leave less than SendMargin: the request is not sent.
func TestReservationTimeCountsAgainstTheMargin(t *testing.T) {
	l := newLimiter(t, slowBackend{lag: 1500 * time.Millisecond}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 10}, SendMargin: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	err := l.Wait(ctx, "POST /v1/refunds")
	dl, _ := ctx.Deadline()
	if left := time.Until(dl); err == nil {
		t.Fatalf("sent with %s left, less than the 2s SendMargin", left.Round(time.Millisecond))
	}
	if !deadline.TooLate(err) {
		t.Fatalf("Wait = %v, want not sent (too late)", err)
	}
}

// TestResendRefusedAfterASendIsNotUnsent: an HTTP client's retry of a
// request that already went out, refused by the limiter, is not reported
// "not sent" (the first send may have acted); a first send refused is.
func TestResendRefusedAfterASendIsNotUnsent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(srv.Close)
	// One slot, then none within MaxWait: the retry is deferred.
	l := newLimiter(t, downBackend{}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 0.1, Burst: 1}, MaxWait: 100 * time.Millisecond})
	c := &http.Client{Transport: l.Transport(nil)}
	send := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader("amount=1"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "refund:evt_1")
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	ctx := deadline.TrackSends(context.Background())
	if err := send(ctx); err != nil {
		t.Fatalf("first send: %v", err)
	}
	err := send(ctx)
	if err == nil {
		t.Fatal("the resend went out; want it refused")
	}
	if _, ok := ratelimit.Deferred(err); ok {
		t.Fatalf("the resend's refusal says not sent, though its first send went out: %v", err)
	}
	// Another call (its own tracker) whose first send is refused: not sent.
	if _, ok := ratelimit.Deferred(send(deadline.TrackSends(context.Background()))); !ok {
		t.Fatal("a first send refused by the limiter is not reported deferred")
	}
}
