// Command worker runs effectively's Temporal worker: it polls the task queue,
// runs the OrderPlaced and PruneRecords workflows and their activities
// (Stripe, SendGrid, Postgres), dispatches pending inbox rows, keeps the
// pruning schedule, and serves GET /livez, /readyz and /metrics (Prometheus)
// on EFFECTIVELY_HEALTH_ADDR. Unless NATS_URL is off it also
// consumes messages from JetStream into the inbox and relays the outbox's
// events to JetStream (see docs/intake.md). With a Stripe webhook secret or
// a SendGrid Event Webhook key it serves the providers' webhooks on
// EFFECTIVELY_WEBHOOK_ADDR (see docs/webhooks.md). With EFFECTIVELY_API_ADDR
// it serves the HTTP intake (see docs/intake.md#http).
//
// The worker applies the database migrations at start, then records its key
// namespace in the database, or refuses to change it under open effects
// (see guardKeyNamespace). `worker migrate`
// applies them and exits, for a deployment that migrates as its own step
// before rolling the workers (the starter never migrates: it names this
// command when the schema is behind). `worker setup` prepares a namespace:
// it migrates, registers the search attributes and makes every start check,
// then exits.
//
// Configuration comes from the environment, read by internal/config; see
// docs/configuration.md. Exit codes: 0 after a clean shutdown (SIGINT or
// SIGTERM: the intake stops fetching and settles what it fetched, the
// effects in flight finish their provider call and its record, within
// EFFECTIVELY_DRAIN_TIMEOUT, then the Temporal worker stops) or a finished
// `worker migrate`, 1 when the worker cannot start or stops on an error (or
// the migration fails), 2 for bad configuration, including a RETENTION
// shorter than the redelivery horizon or an EFFECTIVELY_KEY_NAMESPACE other
// than the one recorded in the database while payments, refunds or receipts
// made under that one are open, or a bad command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/auditschedule"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/internal/leaf/listener"
	"github.com/effectively/effectively/workflows"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// usage is what `worker -h` prints.
const usage = `usage:
  worker           run the worker until SIGINT or SIGTERM (migrates the database first)
  worker migrate   apply the database migrations and exit
  worker setup     migrate, register the search attributes in the namespace and make
                   every start check (key namespace, retention against the horizon), then exit

Configuration comes from the environment: docs/configuration.md lists every
variable. Exit codes: 0 clean shutdown or finished migration or setup, 1 cannot
start or stopped on an error, 2 bad configuration (a search attribute of the
wrong type included) or command line.
`

func run(args []string) int {
	migrateOnly, setupOnly := false, false
	switch {
	case len(args) == 0:
	case len(args) == 1 && args[0] == "migrate":
		migrateOnly = true
	case len(args) == 1 && args[0] == "setup":
		setupOnly = true
	case len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help"):
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "worker: unknown arguments %q\n%s", args, usage)
		return 2
	}
	cfg, err := config.FromEnv()
	if err == nil && !migrateOnly {
		err = cfg.Validate()
	}
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("bad configuration", "error", err.Error())
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if migrateOnly {
		if err := migrate(ctx, cfg, logger); err != nil {
			logger.Error("migration failed", "error", err.Error())
			return 1
		}
		logger.Info("schema is up to date", "version", store.SchemaVersion())
		return 0
	}
	if setupOnly {
		if err := setup(ctx, cfg, logger); err != nil {
			logger.Error("setup failed", "error", err.Error())
			if errors.Is(err, errBadConfig) {
				return 2
			}
			return 1
		}
		return 0
	}
	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("worker stopped", "error", err.Error())
		if errors.Is(err, errBadConfig) {
			return 2
		}
		return 1
	}
	logger.Info("worker stopped cleanly")
	return 0
}

// migrate applies the migrations that are not applied yet and returns.
func migrate(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	pool, err := store.Open(ctx, cfg.DatabaseURL, store.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	return store.Migrate(ctx, pool, logger)
}

// errBadConfig marks a refusal to start that the operator fixes in the
// configuration (exit code 2).
var errBadConfig = errors.New("bad configuration")

// serve builds every dependency once (buildDeps) and runs the worker until
// ctx ends: the Temporal worker, the dispatcher, and with a broker the
// JetStream consumer and the outbox relay. On shutdown the intake stops
// first (no new fetches, in-flight messages settled), then the effects in
// flight finish (see shutdown), then the Temporal worker stops.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	logger.Info("starting worker", "config", cfg)
	warnPublicListeners(cfg, logger)
	warnInsecureDatabase(cfg, logger)
	d, err := buildDeps(ctx, cfg, logger)
	defer d.close()
	if err != nil {
		return err
	}

	_, stopTimeout := cfg.ShutdownTimeouts()
	w := worker.New(d.tc, cfg.TaskQueue, worker.Options{WorkerStopTimeout: stopTimeout})
	d.workflows.Register(w)
	activities.Register(w, d.activities)
	workers := append([]worker.Worker{w}, routeWorkers(d, cfg.TaskQueue, cfg.RouteEffectSlots, stopTimeout)...)
	for _, w := range workers {
		if err := w.Start(); err != nil {
			stopWorkers(workers)
			return fmt.Errorf("start worker: %w", err)
		}
	}
	stopped := false // by shutdown, within the drain timeout
	defer func() {
		if !stopped {
			stopWorkers(workers)
		}
	}()
	logger.Info("worker polling", "task_queue", cfg.TaskQueue, "route_queues", cfg.Workflows.RouteQueues != "")
	// Without the schedule nothing is pruned, and the tables grow; that is
	// no reason to stop taking messages. The next worker start tries again.
	if _, err := retention.EnsureSchedule(ctx, d.tc, retention.ScheduleConfig{Every: cfg.PruneEvery, TaskQueue: cfg.TaskQueue}); err != nil {
		logger.Error("pruning schedule could not be created or updated; records are not pruned until a worker start succeeds", "error", err.Error())
	}
	if _, err := auditschedule.Ensure(ctx, d.tc, auditschedule.Config{Every: cfg.AuditEvery, TaskQueue: cfg.TaskQueue}); err != nil {
		logger.Error("audit schedule could not be created or updated; the ledger is not audited until a worker start succeeds", "error", err.Error())
	}

	// The health listener outlives the intake: during the drain /readyz
	// answers 503 (check "shutdown") and /metrics still shows the effects
	// finishing.
	var draining atomic.Bool
	if cfg.HealthAddr != "" {
		var stopHealth func()
		ctx, stopHealth = runHealth(ctx, cfg.HealthAddr, d, &draining, logger)
		defer stopHealth()
	}
	parts := []func(context.Context) error{d.dispatcher.Run}
	for _, src := range d.sources {
		parts = append(parts, src.Run)
	}
	if d.relay != nil {
		parts = append(parts, d.relay.Run)
	}
	if d.api != nil {
		parts = append(parts, d.api.Serve)
	}
	if d.webhooks != nil {
		parts = append(parts, func(ctx context.Context) error { return serveWebhooks(ctx, cfg.WebhookAddr, d.webhooks, logger) })
	}
	if cfg.PprofAddr != "" {
		parts = append(parts, func(ctx context.Context) error { return servePprof(ctx, cfg.PprofAddr, logger) })
	}
	if d.codecServer != nil {
		parts = append(parts, func(ctx context.Context) error { return codec.Serve(ctx, d.codecServer.addr, d.codecServer.h, logger) })
	}
	var stopping atomic.Int64
	err = runParts(ctx, &draining, &stopping, parts...)
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the health listener failed
	}
	logger.Info("intake stopped", "dispatcher", d.dispatcher.Stats())
	for _, src := range d.sources {
		logger.Info("source stopped", "source", src.Name(), "stats", src.Stats())
	}
	if d.relay != nil {
		logger.Info("outbox relay stopped", "outbox", d.relay.Stats())
	}
	stopping.CompareAndSwap(0, time.Now().UnixNano())
	stopped = true
	shutdown(workers, d.activities.Drain, time.Unix(0, stopping.Load()).Add(cfg.DrainTimeout), stopTimeout, logger)
	return err
}

// routeWorkers are the workers of the routes' effect queues
// (workflows.RouteQueue), one per route, each with slots of its own
// (EFFECTIVELY_ROUTE_EFFECT_SLOTS): with EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE a
// route's charges waiting at a provider's rate limit hold none of another
// route's slots, and a backlog past its slots waits in Temporal's task
// queue rather than at the limiter. They poll whether it is on or not, so
// that turning it off, or running workers of both settings side by side,
// strands no activity.
func routeWorkers(d *deps, queue string, slots int, stopTimeout time.Duration) []worker.Worker {
	out := make([]worker.Worker, 0, len(d.consumers))
	for _, consumer := range d.consumers {
		rw := worker.New(d.tc, workflows.RouteQueue(queue, consumer), worker.Options{WorkerStopTimeout: stopTimeout, DisableWorkflowWorker: true, MaxConcurrentActivityExecutionSize: slots})
		activities.Register(rw, d.activities)
		out = append(out, rw)
	}
	return out
}

// stopWorkers stops the Temporal workers all at once, each stop waiting
// for its tasks up to WorkerStopTimeout, and returns when every one has
// stopped; Stop of a worker never started is a no-op.
func stopWorkers(workers []worker.Worker) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.Stop)
	}
	wg.Wait()
}

// runParts runs the intake's parts until ctx ends or one of them fails, and
// returns the first failure. From either moment on draining is set, so
// /readyz says the worker is going away (check "shutdown"), and stopping
// holds that moment, from which EFFECTIVELY_DRAIN_TIMEOUT runs.
func runParts(ctx context.Context, draining *atomic.Bool, stopping *atomic.Int64, parts ...func(context.Context) error) error {
	mark := func() {
		stopping.CompareAndSwap(0, time.Now().UnixNano())
		draining.Store(true)
	}
	g, gctx := errgroup.WithContext(ctx)
	defer context.AfterFunc(gctx, mark)()
	for _, run := range parts {
		g.Go(func() error { return run(gctx) })
	}
	err := g.Wait()
	mark()
	return err
}

// shutdownCheck is /readyz's "shutdown" check: it fails once draining is
// set.
func shutdownCheck(draining *atomic.Bool) health.Check {
	return health.Check{Name: "shutdown", Fn: func(context.Context) error {
		if draining.Load() {
			return errors.New("the worker is draining before it stops")
		}
		return nil
	}}
}

// runHealth serves the health listener (GET /livez, /readyz, /metrics) on
// its own context, which outlives ctx, and returns a context that ends
// with ctx or when the listener fails. stop ends the listener.
func runHealth(ctx context.Context, addr string, d *deps, draining *atomic.Bool, logger *slog.Logger) (context.Context, func()) {
	checks := []health.Check{health.Postgres(d.store), health.Temporal(d.tc), shutdownCheck(draining)}
	if d.broker != nil {
		checks = append(checks, health.NATS(d.broker.nc))
	}
	for _, src := range d.sources {
		checks = append(checks, src.Check())
	}
	if d.api != nil {
		checks = append(checks, health.Check{Name: "api", Fn: d.api.Ready})
	}
	hctx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
	herr := make(chan error, 1)
	go func() { herr <- serveHealth(hctx, addr, health.New(0, checks...), d.reg, logger) }()
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		if err := <-herr; err != nil {
			cancel(err)
		}
		herr <- nil
	}()
	return ctx, func() {
		cancel(nil)
		stopHealth()
		if err := <-herr; err != nil {
			logger.Debug("health listener stopped", "error", err.Error())
		}
	}
}

// shutdown stops the Temporal workers without cutting an effect in half,
// by deadline (EFFECTIVELY_DRAIN_TIMEOUT from the shutdown's start). The
// SDK cancels in-flight local activities the moment a worker stops, so the
// effects are drained first: drain is closed (an effect that starts now
// fails retryably before it claims anything, and runs elsewhere), the ones
// in flight get until stopShare before deadline to finish their provider
// call and their record, and only then are the workers stopped, all at
// once (each waits up to stopShare for its tasks; the SDK stops a worker's
// parts one after the other). Past deadline shutdown returns, stops or no
// stops: an effect still running keeps going on its own context until the
// process exits, and if it has not recorded by then, its retry replays it
// from the ledger or the provider's key.
func shutdown(workers []worker.Worker, drain *activities.Drainer, deadline time.Time, stopShare time.Duration, logger *slog.Logger) {
	start := time.Now()
	inFlight := drain.InFlight()
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-stopShare))
	defer cancel()
	if left, err := drain.Wait(ctx); err != nil {
		logger.Warn("drain timed out: effects still in flight go to the retry path", "in_flight", left, "left_for_the_workers", time.Until(deadline).Round(time.Millisecond).String())
	} else {
		logger.Info("effects drained", "in_flight_at_start", inFlight, "took", time.Since(start).Round(time.Millisecond).String())
	}
	done := make(chan struct{})
	go func() {
		stopWorkers(workers)
		close(done)
	}()
	timer := time.NewTimer(max(time.Until(deadline), 0))
	defer timer.Stop()
	select {
	case <-done:
		logger.Info("temporal workers stopped", "took", time.Since(start).Round(time.Millisecond).String())
	case <-timer.C:
		logger.Warn("temporal workers still stopping at the drain timeout: exiting; their tasks go to the retry path", "took", time.Since(start).Round(time.Millisecond).String())
	}
}

// serveHealth answers GET /livez, /healthz (alias of /livez), /readyz and
// /metrics until ctx ends.
func serveHealth(ctx context.Context, addr string, checker *health.Checker, reg *prometheus.Registry, logger *slog.Logger) error {
	mux := http.NewServeMux()
	checker.Register(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return listener.ListenAndServe(ctx, "health endpoint", addr, mux, listener.Health(), logger)
}

// serveWebhooks serves the providers' webhooks on addr until ctx ends,
// within listener.Webhook's time, connection and rate limits: the endpoint
// is meant to be reachable from the internet.
func serveWebhooks(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) error {
	return listener.ListenAndServe(ctx, "webhook endpoint", addr, h, listener.Webhook(), logger)
}

// warnPublicListeners logs a warning for each listener bound beyond
// loopback, which Validate accepted only with an opt-in
// (EFFECTIVELY_PUBLIC_LISTENERS or EFFECTIVELY_ALLOW_PUBLIC_LISTENERS): an
// exposed listener is never silent.
func warnPublicListeners(cfg config.Config, logger *slog.Logger) {
	for _, l := range cfg.PublicListeners() {
		logger.Warn("listener bound beyond loopback: keep it behind a firewall or a network policy",
			"listener", l.Name, "variable", l.Variable, "addr", l.Addr)
	}
}

// warnInsecureDatabase logs a warning when DATABASE_URL reaches Postgres
// beyond loopback without verified TLS (sslmode disable, allow or prefer).
func warnInsecureDatabase(cfg config.Config, logger *slog.Logger) {
	if w := cfg.DatabaseTLSWarning(); w != "" {
		logger.Warn(w, "variable", "DATABASE_URL")
	}
}

// servePprof serves Go's profiles (/debug/pprof/…) on addr, for an operator
// or the benchmark to see where the worker spends its time.
func servePprof(ctx context.Context, addr string, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return listener.ListenAndServe(ctx, "pprof endpoint", addr, mux, listener.Pprof(), logger)
}
