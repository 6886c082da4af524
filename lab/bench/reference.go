package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// Names of the bench-only workflows and activities, on task queues of
// their own.
const (
	floorWorkflowName = "BenchFloor"
	floorChargeName   = "BenchFloorCharge"
	floorReceiptName  = "BenchFloorReceipt"
	naiveWorkflowName = "BenchNaive"
	naiveChargeName   = "BenchNaiveCharge"
	naiveReceiptName  = "BenchNaiveReceipt"
	plainConsumer     = "bench-plain"
)

// floorWorkflow is the shape of OrderPlaced with no work: two local
// activities that return at once.
func floorWorkflow(ctx workflow.Context, id string) (string, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	if err := workflow.ExecuteLocalActivity(ctx, floorChargeName, id).Get(ctx, &out); err != nil {
		return "", err
	}
	if err := workflow.ExecuteLocalActivity(ctx, floorReceiptName, id).Get(ctx, &out); err != nil {
		return "", err
	}
	return out, nil
}

func noop(_ context.Context, id string) (string, error) { return id, nil }

// runConcurrent runs n calls of one, at most inFlight at once, and returns
// each call's latency. The first error stops the run.
func runConcurrent(ctx context.Context, n, inFlight int, one func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	return runCalls(ctx, n, func(r *callRun) {
		var next atomic.Int64
		for range min(inFlight, n) {
			r.wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= n || r.ctx.Err() != nil || !r.call(i, one) {
						return
					}
				}
			})
		}
	})
}

// runPaced starts call i of one i/rate seconds after the first, whatever
// is in flight (an open loop), and returns each call's latency. The first
// error stops the run.
func runPaced(ctx context.Context, n int, rate float64, one func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	return runCalls(ctx, n, func(r *callRun) {
		for i := range n {
			due := r.t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if sleepCtx(r.ctx, time.Until(due)) != nil {
				return
			}
			r.wg.Go(func() { r.call(i, one) })
		}
	})
}

// callRun is one run of calls: their latencies, and the first error,
// which cancels ctx.
type callRun struct {
	ctx      context.Context
	cancel   context.CancelFunc
	t0       time.Time
	wg       sync.WaitGroup
	lat      []time.Duration
	errOnce  sync.Once
	firstErr error
}

// call runs call i of one and records its latency; false when it failed.
func (r *callRun) call(i int, one func(ctx context.Context, i int) error) bool {
	start := time.Now()
	if err := one(r.ctx, i); err != nil {
		r.errOnce.Do(func() { r.firstErr = err; r.cancel() })
		return false
	}
	r.lat[i] = time.Since(start)
	return true
}

// runCalls runs n calls as launch starts them, waits for them all, and
// returns their latencies, the time they took and the first error (or
// ctx's, when it ended the run).
func runCalls(ctx context.Context, n int, launch func(r *callRun)) ([]time.Duration, time.Duration, error) {
	r := &callRun{lat: make([]time.Duration, n), t0: time.Now()}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	launch(r)
	r.wg.Wait()
	if r.firstErr == nil {
		r.firstErr = ctx.Err()
	}
	return r.lat, time.Since(r.t0), r.firstErr
}

// runFloor measures Temporal's floor: a client in this process, its worker
// beside it, eager start, two no-op local activities. The measured run
// (not the warm-up) runs inside measure when it is not nil, so that it
// can be counted on its own.
func (s *stack) runFloor(ctx context.Context, cfg Config, measure func(run func() error) error) (Result, error) {
	return s.runFloorAt(ctx, cfg, 0, measure)
}

// runFloorAt is runFloor, closed loop at cfg.InFlight when rate is 0, else
// an open loop starting rate workflows a second.
func (s *stack) runFloorAt(ctx context.Context, cfg Config, rate float64, measure func(run func() error) error) (Result, error) {
	res := Result{Name: "Temporal floor", InFlight: cfg.InFlight, TargetRate: rate, Messages: cfg.FloorWorkflows, Unique: cfg.FloorWorkflows}
	if rate > 0 {
		res.InFlight = 0
	}
	c, err := client.Dial(s.clientOptions())
	if err != nil {
		return res, err
	}
	defer c.Close()
	queue := "bench-floor-" + randomTag(4)
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: floorChargeName})
	w.RegisterActivityWithOptions(noop, activity.RegisterOptions{Name: floorReceiptName})
	if err := w.Start(); err != nil {
		return res, err
	}
	defer w.Stop()
	tag := randomTag(4)
	id := func(prefix string, i int) string { return fmt.Sprintf("bench-floor-%s-%s-%d", tag, prefix, i) }
	run := func(prefix string) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			id := id(prefix, i)
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			r, err := c.ExecuteWorkflow(wctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue, EnableEagerStart: true}, floorWorkflowName, id)
			if err != nil {
				return err
			}
			return r.Get(wctx, nil)
		}
	}
	if _, _, err := runConcurrent(ctx, cfg.Warmup, cfg.InFlight, run("warm")); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	var (
		lat     []time.Duration
		elapsed time.Duration
	)
	measured := func() error {
		before := s.sample()
		instr := s.startInstructions(cfg)
		var err error
		if rate > 0 {
			lat, elapsed, err = runPaced(ctx, cfg.FloorWorkflows, rate, run("run"))
		} else {
			lat, elapsed, err = runConcurrent(ctx, cfg.FloorWorkflows, cfg.InFlight, run("run"))
		}
		res.CPU = cpuBetween(before, s.sample())
		res.CPU.Instructions = s.stopInstructions(cfg, instr)
		return err
	}
	if measure == nil {
		measure = func(run func() error) error { return run() }
	}
	if err := measure(measured); err != nil {
		return res, err
	}
	res.Elapsed, res.Latency = elapsed, summarize(lat)
	res.Throughput = float64(cfg.FloorWorkflows) / elapsed.Seconds()
	for i := range min(cfg.FloorWorkflows, cfg.HistorySample) {
		res.workflowIDs = append(res.workflowIDs, id("run", i))
	}
	return res, nil
}

// naiveInput is one message of the naive layout.
type naiveInput struct {
	MessageID     string `json:"message_id"`
	OrderID       int64  `json:"order_id"`
	Amount        int64  `json:"amount"`
	PaymentMethod string `json:"payment_method"`
	To            string `json:"to"`
}

// naiveActivityTimeout is the start-to-close of the naive layout's
// activities. Each activity leaves a timeout timer in the server that fires
// this long after its start, done or not, and loads the closed workflow's
// state then: Run waits it out before the counted phases, which would
// otherwise pay for them (a minute's timers added 0.29 mutable-state reads
// to each message of the first e2e round).
const naiveActivityTimeout = 10 * time.Second

// naiveWorkflow is what a first implementation does: two regular
// activities with default options.
func naiveWorkflow(ctx workflow.Context, in naiveInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: naiveActivityTimeout})
	if err := workflow.ExecuteActivity(ctx, naiveChargeName, in).Get(ctx, nil); err != nil {
		return err
	}
	return workflow.ExecuteActivity(ctx, naiveReceiptName, in).Get(ctx, nil)
}

// naiveActivities charge and mail through the same clients and simulators,
// under the same keys, and record with plain SQL.
type naiveActivities struct {
	s        *stack
	payments *payment.Client
	mailer   *email.Client
}

func (a *naiveActivities) charge(ctx context.Context, in naiveInput) error {
	ch, err := a.payments.Charge(ctx, payment.ChargeRequest{
		IdempotencyKey: identity.MustKey(identity.EffectPayment, in.MessageID), MessageID: in.MessageID,
		OrderID: in.OrderID, Amount: in.Amount, Currency: "usd", PaymentMethod: in.PaymentMethod,
	})
	if err != nil {
		return err
	}
	_, err = a.s.work.Exec(ctx, `
		INSERT INTO bench_naive (message_id, payment_ref, charged_at) VALUES ($1, $2, now())
		ON CONFLICT (message_id) DO UPDATE SET payment_ref = EXCLUDED.payment_ref, charged_at = now()`,
		in.MessageID, ch.PaymentIntentID)
	return err
}

func (a *naiveActivities) receipt(ctx context.Context, in naiveInput) error {
	ref, err := a.mailer.Send(ctx, email.Mail{
		IdempotencyKey: identity.MustKey(identity.EffectEmail, in.MessageID), MessageID: in.MessageID,
		To: in.To, Subject: fmt.Sprintf("Receipt for order %d", in.OrderID), Text: "Thank you for your order.",
	})
	if err != nil {
		return err
	}
	_, err = a.s.work.Exec(ctx, `UPDATE bench_naive SET receipt_ref = $2, receipt_at = now() WHERE message_id = $1`, in.MessageID, ref)
	return err
}

// runNaive measures the naive layout: its worker in this process, the
// workflows started from a separate client (no eager start).
func (s *stack) runNaive(ctx context.Context, cfg Config, pl *planner) (Result, error) {
	res := Result{Name: "naive layout", InFlight: cfg.InFlight, Messages: cfg.NaiveWorkflows, Unique: cfg.NaiveWorkflows}
	payments, err := payment.New(payment.Config{APIKey: "sk_test_bench", BaseURL: s.stripeURL, Timeout: 20 * time.Second}) //nolint:gosec // fake key for the local simulator
	if err != nil {
		return res, err
	}
	mailer, err := email.New(email.Config{APIKey: "SG.bench", BaseURL: s.sendgridURL, From: "receipts@example.com", Timeout: 10 * time.Second})
	if err != nil {
		return res, err
	}
	wc, err := client.Dial(s.clientOptions())
	if err != nil {
		return res, err
	}
	defer wc.Close()
	starter, err := client.Dial(s.clientOptions())
	if err != nil {
		return res, err
	}
	defer starter.Close()
	queue := "bench-naive-" + randomTag(4)
	acts := &naiveActivities{s: s, payments: payments, mailer: mailer}
	w := worker.New(wc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(naiveWorkflow, workflow.RegisterOptions{Name: naiveWorkflowName})
	w.RegisterActivityWithOptions(acts.charge, activity.RegisterOptions{Name: naiveChargeName})
	w.RegisterActivityWithOptions(acts.receipt, activity.RegisterOptions{Name: naiveReceiptName})
	if err := w.Start(); err != nil {
		return res, err
	}
	defer w.Stop()
	run := func(p plan) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			m := p.msgs[i]
			in := naiveInput{MessageID: m.id, OrderID: m.orderID, Amount: 1999, PaymentMethod: "pm_card_visa", To: fmt.Sprintf("naive%d@example.com", i)}
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			r, err := starter.ExecuteWorkflow(wctx, client.StartWorkflowOptions{ID: "bench-naive/" + m.id, TaskQueue: queue}, naiveWorkflowName, in)
			if err != nil {
				return err
			}
			return r.Get(wctx, nil)
		}
	}
	warm := pl.plan("naivewarm", cfg.Warmup, 0, 0)
	if _, _, err := runConcurrent(ctx, len(warm.msgs), cfg.InFlight, run(warm)); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	p := pl.plan("naive", cfg.NaiveWorkflows, 0, 0)
	before := s.sample()
	lat, elapsed, err := runConcurrent(ctx, len(p.msgs), cfg.InFlight, run(p))
	if err != nil {
		return res, err
	}
	res.CPU = cpuBetween(before, s.sample())
	var recorded int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM bench_naive WHERE message_id LIKE $1 AND receipt_at IS NOT NULL`, p.pattern).Scan(&recorded); err != nil {
		return res, err
	}
	if recorded != len(p.msgs) {
		return res, fmt.Errorf("naive layout: %d of %d messages recorded", recorded, len(p.msgs))
	}
	res.Elapsed, res.Latency = elapsed, summarize(lat)
	res.Throughput = float64(len(p.msgs)) / elapsed.Seconds()
	return res, nil
}

// runPlain measures the seed's technique 1 with no Temporal: per message
// one transaction that inserts the processed row (ON CONFLICT DO NOTHING)
// and, for a new message, changes the order's state.
func (s *stack) runPlain(ctx context.Context, cfg Config, p plan) (Result, error) {
	res := Result{Name: "plain consumer", InFlight: cfg.PlainClients, Messages: len(p.sends), Unique: len(p.msgs), Duplicates: p.dups}
	var suppressed atomic.Int64
	handle := func(ctx context.Context, i int) error {
		m := p.msgs[p.sends[i]]
		return store.WithTx(ctx, s.work, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `
				INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ($1, $2, 'paid', $3)
				ON CONFLICT DO NOTHING`, plainConsumer, m.id, m.orderID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				suppressed.Add(1)
				return nil
			}
			_, err = tx.Exec(ctx, `
				INSERT INTO orders (id, status, amount, currency, message_id) VALUES ($1, 'paid', 1999, 'usd', $2)
				ON CONFLICT (id) DO UPDATE SET status = 'paid', updated_at = now()`, m.orderID, m.id)
			return err
		})
	}
	// The sends are handled in order by a pool of consumers, as a broker
	// would deliver them.
	before := s.sample()
	lat, elapsed, err := runConcurrent(ctx, len(p.sends), cfg.PlainClients, handle)
	if err != nil {
		return res, err
	}
	res.CPU = cpuBetween(before, s.sample())
	res.Suppressed = int(suppressed.Load())
	if res.Suppressed != p.dups {
		return res, errors.New("plain consumer: suppressed copies do not match the copies sent")
	}
	res.Elapsed, res.Latency = elapsed, summarize(lat)
	res.Throughput = float64(len(p.sends)) / elapsed.Seconds()
	res.DuplicateRate = float64(res.Suppressed) / elapsed.Seconds()
	return res, nil
}

// warmPlain warms the plain consumer's connections and tables up with
// messages of its own.
func (s *stack) warmPlain(ctx context.Context, cfg Config, pl *planner) error {
	warm := pl.plan("plainwarm", cfg.Warmup*10, 0, 0)
	if _, _, err := runConcurrent(ctx, len(warm.sends), cfg.PlainClients, func(ctx context.Context, i int) error {
		m := warm.msgs[i]
		_, err := s.work.Exec(ctx, `INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ($1, $2, 'paid', $3) ON CONFLICT DO NOTHING`, plainConsumer, m.id, m.orderID)
		return err
	}); err != nil {
		return fmt.Errorf("plain consumer warm-up: %w", err)
	}
	return nil
}
