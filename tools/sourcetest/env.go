package sourcetest

import (
	"context"
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
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// env is one case's database, fake Temporal and subscription.
type env struct {
	t    *testing.T
	sub  Subscription
	url  string
	db   *pgxpool.Pool // the test's own queries, never hooked
	hook *pgHook
	tc   *testenv.FakeTemporal
}

func newEnv(t *testing.T, h Harness, o SubscriptionOptions) *env {
	t.Helper()
	url := storetest.NewDatabase(t)
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &env{t: t, sub: h.NewSubscription(t, o), url: url, db: db, hook: &pgHook{}, tc: testenv.NewFakeTemporal()}
}

// newIntake is the Intake of one worker process: a pool of its own, through
// the case's hook, and the pool's own hook, which the worker's crash kills.
func (e *env) newIntake() (*intake.Intake, *poolHook) {
	e.t.Helper()
	pc, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	pc.MaxConns = 16
	hook := &poolHook{pgHook: e.hook}
	pc.ConnConfig.Tracer = hook
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	in, err := intake.New(store.New(pool), e.tc, intake.Config{Logger: testenv.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	return in, hook
}

// worker returns a new worker with an Intake of its own.
func (e *env) worker(o WorkerOptions) Worker {
	e.t.Helper()
	in, hook := e.newIntake()
	return &killable{Worker: e.sub.NewWorker(e.t, in, o), hook: hook}
}

// killable is a worker whose Crash also ends its Postgres statements, as a
// SIGKILL does: the harness's Crash drops the broker connection, and
// goroutines it leaves (a held last delivery retrying its record) must not
// commit anything after it.
type killable struct {
	Worker
	hook *poolHook
}

func (w *killable) Crash() {
	w.hook.dead.Store(true)
	w.Worker.Crash()
}

// run runs w until the returned stop is called (or the test ends); stop
// waits for Run to return, and fails the test when it returns an error or
// does not return within 30s.
func (e *env) run(w Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("%s: Run returned %v", w.Name(), err)
				}
			case <-time.After(30 * time.Second):
				e.t.Errorf("%s: Run did not return within 30s of the shutdown", w.Name())
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// dispatch runs a Dispatcher, as every worker process does, for the rows
// a worker that stopped left pending (its queued fast-path starts).
func (e *env) dispatch() {
	e.t.Helper()
	in, _ := e.newIntake()
	d, err := intake.NewDispatcher(in, intake.DispatcherConfig{MinAge: time.Second, Interval: 100 * time.Millisecond, Logger: testenv.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
}

// publish publishes raw, retrying for up to 30s while the broker refuses
// (a restart in progress).
func (e *env) publish(raw []byte) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.sub.Publish(e.t, raw)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("publish: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// eventually polls cond until it holds or timeout passes, then fails the
// test with what and the state it last saw.
func (e *env) eventually(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s; %s", timeout, what, e.state())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// state describes what the case left, for a failure message.
func (e *env) state() string {
	rows := e.inbox()
	dups := 0
	for _, r := range rows {
		dups += r.duplicates
	}
	return fmt.Sprintf("inbox rows %d (duplicates %d), quarantine rows %v, workflow starts %d, unsettled at the broker %d",
		len(rows), dups, e.quarantine(), len(e.tc.Starts()), e.sub.Unsettled(e.t))
}

// inboxRow is what the inbox holds of one message.
type inboxRow struct {
	duplicates int
	receivedAt time.Time
}

func (e *env) inbox() map[string]inboxRow {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT message_id, duplicates, received_at FROM inbox`)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]inboxRow{}
	for rows.Next() {
		var (
			id string
			r  inboxRow
		)
		if err := rows.Scan(&id, &r.duplicates, &r.receivedAt); err != nil {
			e.t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// quarantineRow is what an operator sees of one quarantine row.
type quarantineRow struct {
	reason string
	size   int64
	raw    []byte
}

func (e *env) quarantineRows() []quarantineRow {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT reason, size, raw FROM quarantine ORDER BY id`)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (quarantineRow, error) {
		var q quarantineRow
		err := r.Scan(&q.reason, &q.size, &q.raw)
		return q, err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// quarantine counts the quarantine rows by reason.
func (e *env) quarantine() map[string]int {
	out := map[string]int{}
	for _, q := range e.quarantineRows() {
		out[q.reason]++
	}
	return out
}

// settled reports whether ids each have their inbox row, every one started
// once, and the broker holds nothing unsettled.
func (e *env) settled(ids []string) bool {
	rows := e.inbox()
	starts := e.tc.Starts()
	for _, id := range ids {
		wf, _ := identity.WorkflowID(message.ConsumerOrderPlaced, id)
		if _, ok := rows[id]; !ok || starts[wf] != 1 {
			return false
		}
	}
	return len(rows) == len(ids) && e.sub.Unsettled(e.t) == 0
}

// order is a valid order.placed message.
func order(id string, orderID int) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`, id, orderID)
}

// orders returns n message IDs with prefix and their messages.
func orders(prefix string, n int) ([]string, [][]byte) {
	ids, raws := make([]string, n), make([][]byte, n)
	for i := range n {
		ids[i] = fmt.Sprintf("evt_%s_%03d", prefix, i)
		raws[i] = order(ids[i], 1000+i)
	}
	return ids, raws
}

// pgHook is the suite's hand on the workers' Postgres connections: it
// breaks the connection of an inbox statement before it runs (a crash
// before the commit, or Postgres down), and runs a function once an inbox
// statement committed (a crash before the settle). A broken connection
// fails its statement, so nothing of it commits.
type pgHook struct {
	mu          sync.Mutex
	beforeInbox func()      // run once, then the statement's connection is broken
	afterInbox  func()      // run once, after an inbox statement succeeded
	down        atomic.Bool // every statement fails
	inboxLost   atomic.Bool // every inbox statement fails, its connection broken
}

func isInbox(sql string) bool { return strings.Contains(sql, "INSERT INTO inbox") }

// take returns *f and clears it.
func (h *pgHook) take(f *func()) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := *f
	*f = nil
	return g
}

func (h *pgHook) set(f *func(), g func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*f = g
}

// breakIfDown breaks conn when the statement sql must fail.
func (h *pgHook) breakIfDown(conn *pgx.Conn, sql string) {
	inbox := isInbox(sql)
	if inbox {
		if f := h.take(&h.beforeInbox); f != nil {
			f()
			_ = conn.PgConn().Conn().Close()
			return
		}
	}
	if h.down.Load() || (inbox && h.inboxLost.Load()) {
		_ = conn.PgConn().Conn().Close()
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (h *pgHook) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	h.breakIfDown(conn, d.SQL)
	if isInbox(d.SQL) {
		return context.WithValue(ctx, inboxKey{}, true)
	}
	return ctx
}

type inboxKey struct{}

// TraceQueryEnd implements pgx.QueryTracer.
func (h *pgHook) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	h.ended(ctx, d.Err)
}

// ended runs afterInbox once an inbox statement or batch ended without err.
func (h *pgHook) ended(ctx context.Context, err error) {
	if ctx.Value(inboxKey{}) == nil || err != nil {
		return
	}
	if f := h.take(&h.afterInbox); f != nil {
		f()
	}
}

// TraceBatchStart implements pgx.BatchTracer: a group of inbox inserts.
func (h *pgHook) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if isInbox(q.SQL) {
			h.breakIfDown(conn, q.SQL)
			return context.WithValue(ctx, inboxKey{}, true)
		}
	}
	if h.down.Load() {
		_ = conn.PgConn().Conn().Close()
	}
	return ctx
}

// poolHook is the case's hook on one worker's pool: once the worker
// crashed (dead), every statement's connection is broken before it runs.
type poolHook struct {
	*pgHook
	dead atomic.Bool
}

// TraceQueryStart implements pgx.QueryTracer.
func (h *poolHook) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if h.dead.Load() {
		_ = conn.PgConn().Conn().Close()
		return ctx
	}
	return h.pgHook.TraceQueryStart(ctx, conn, d)
}

// TraceBatchStart implements pgx.BatchTracer.
func (h *poolHook) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if h.dead.Load() {
		_ = conn.PgConn().Conn().Close()
		return ctx
	}
	return h.pgHook.TraceBatchStart(ctx, conn, d)
}

// TraceBatchQuery implements pgx.BatchTracer.
func (h *pgHook) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer: a batch of inbox statements
// (a group, or one call that claims a payment) committed when it ended
// without an error.
func (h *pgHook) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	h.ended(ctx, d.Err)
}
