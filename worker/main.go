// Command worker runs effectively's Temporal worker: it polls the task queue,
// runs the OrderPlaced and PruneRecords workflows and their activities
// (Stripe, SendGrid, Postgres), dispatches pending inbox rows, keeps the
// pruning schedule, and serves GET /livez, /readyz and /metrics (Prometheus)
// on EFFECTIVELY_HEALTH_ADDR. Unless NATS_URL is off it also
// consumes messages from JetStream into the inbox and relays the outbox's
// events to JetStream (see docs/intake.md). With a Stripe webhook secret or
// a SendGrid Event Webhook key it serves the providers' webhooks on
// EFFECTIVELY_WEBHOOK_ADDR (see docs/webhooks.md).
//
// The worker applies the database migrations at start, then records its key
// namespace in the database, or refuses to change it under open effects
// (see guardKeyNamespace). `worker migrate`
// applies them and exits, for a deployment that migrates as its own step
// before rolling the workers (the starter never migrates: it names this
// command when the schema is behind).
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/codec"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/health"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/listener"
	"github.com/effectively/effectively/internal/metrics"
	"github.com/effectively/effectively/internal/outbox"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/pruning"
	"github.com/effectively/effectively/internal/retention"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/temporalclient"
	"github.com/effectively/effectively/internal/tracing"
	"github.com/effectively/effectively/internal/webhook"
	"github.com/effectively/effectively/workflows"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// usage is what `worker -h` prints.
const usage = `usage:
  worker           run the worker until SIGINT or SIGTERM (migrates the database first)
  worker migrate   apply the database migrations and exit

Configuration comes from the environment: docs/configuration.md lists every
variable. Exit codes: 0 clean shutdown or finished migration, 1 cannot start
or stopped on an error, 2 bad configuration or command line.
`

func run(args []string) int {
	migrateOnly := false
	switch {
	case len(args) == 0:
	case len(args) == 1 && args[0] == "migrate":
		migrateOnly = true
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

// guardKeyNamespace records the key namespace in the database, or refuses
// to start (exit 2) when it differs from the recorded one while effects
// made under that one are open: retried under new keys, they would be new
// requests at Stripe (store.GuardKeyNamespace). `worker migrate` does not
// run it: it changes the schema only, and may run from a job that is not
// given the workers' configuration.
func guardKeyNamespace(ctx context.Context, pool *pgxpool.Pool, configured string, logger *slog.Logger) error {
	res, err := store.GuardKeyNamespace(ctx, pool, configured)
	if errors.Is(err, store.ErrKeyNamespaceInUse) {
		return fmt.Errorf("%w: %s: %w", errBadConfig, config.EnvKeyNamespace, err)
	}
	if err != nil {
		return fmt.Errorf("key namespace guard: %w", err)
	}
	switch {
	case res.Changed && res.HadRecord:
		logger.Warn("key namespace changed: no payment, refund or receipt of the previous one was open",
			"variable", config.EnvKeyNamespace, "previous", res.Recorded, "namespace", configured)
	case !res.HadRecord:
		logger.Info("key namespace recorded", "variable", config.EnvKeyNamespace, "namespace", configured)
	}
	return nil
}

// errBadConfig marks a refusal to start that the operator fixes in the
// configuration (exit code 2).
var errBadConfig = errors.New("bad configuration")

// serve builds every dependency once and runs the worker until ctx ends:
// the Temporal worker, the dispatcher, and with a broker the JetStream
// consumer and the outbox relay. On shutdown the intake stops first (no new
// fetches, in-flight messages settled), then the effects in flight finish
// (see shutdown), then the Temporal worker stops.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	logger.Info("starting worker", "config", cfg)
	warnPublicListeners(cfg, logger)
	warnInsecureDatabase(cfg, logger)
	// One registry for the worker's metrics and the Temporal SDK's, served
	// at /metrics on the health listener.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	temporalMetrics, closeTemporalMetrics := metrics.TemporalHandler(reg)
	defer func() { _ = closeTemporalMetrics.Close() }()
	wfs, err := workflows.New(cfg.Workflows)
	if err != nil {
		return err
	}
	pool, err := store.Open(ctx, cfg.DatabaseURL, store.PoolConfig{MaxConns: int32(cfg.DatabaseMaxConns)}) //nolint:gosec // validated: 4 to 1000
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	if err := guardKeyNamespace(ctx, pool, cfg.KeyNamespace, logger); err != nil {
		return err
	}
	// The provider clients' requests are timed by provider, operation and
	// status class.
	cfg.Stripe.HTTPClient = m.InstrumentClient(metrics.ProviderStripe, cfg.Stripe.HTTPClient)
	if cfg.Email.HTTPClient == nil {
		timeout := cfg.Email.Timeout
		if timeout == 0 {
			timeout = email.DefaultTimeout
		}
		cfg.Email.HTTPClient = &http.Client{Timeout: timeout}
	}
	cfg.Email.HTTPClient = m.InstrumentClient(metrics.ProviderSendGrid, cfg.Email.HTTPClient)
	payments, err := payment.New(cfg.Stripe)
	if err != nil {
		return fmt.Errorf("stripe client: %w", err)
	}
	mailer, err := email.New(cfg.Email)
	if err != nil {
		return fmt.Errorf("sendgrid client: %w", err)
	}
	codecServer, err := newCodecServer(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadConfig, err)
	}
	// Tracing (off unless OTEL_TRACES_EXPORTER or an OTLP endpoint is set):
	// before the Temporal client, whose interceptor carries the traces.
	shutdownTracing, tracingOn, err := tracing.Setup(ctx, config.OTelLookup, "effectively-worker")
	if err != nil {
		return fmt.Errorf("%w: %w", errBadConfig, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flushing traces", "error", err.Error())
		}
	}()
	var interceptors []interceptor.ClientInterceptor
	if tracingOn {
		ti, err := tracing.TemporalInterceptor()
		if err != nil {
			return err
		}
		interceptors = append(interceptors, ti)
		logger.Info("tracing on: spans are exported over OTLP (OTEL_* variables)")
	}
	tc, namespace, err := temporalclient.DialWithMetrics(ctx, cfg.Temporal, logger, temporalMetrics, interceptors...)
	if err != nil {
		return err
	}
	defer tc.Close()
	// Operators find a message's workflow by these attributes; starts that
	// set them fail while they are unregistered.
	if err := temporalclient.EnsureSearchAttributes(ctx, tc, namespace, workflows.SearchAttributeKeys()); err != nil {
		logger.Warn("search attributes", "error", err.Error())
	}
	st := store.New(pool)
	in, err := intake.New(st, tc, intake.Config{TaskQueue: cfg.TaskQueue, Logger: logger, EagerStart: true, Metrics: m})
	if err != nil {
		return err
	}

	// The broker comes before the Temporal worker: the retention check
	// needs the consumer's configuration, and nothing may run before it.
	var b *broker
	if cfg.NATS.Enabled() {
		if b, err = connectBroker(ctx, cfg, in, logger); err != nil {
			return err
		}
		defer b.close()
	}
	var (
		redelivery *retention.Redelivery
		dupWindow  time.Duration
	)
	if b != nil {
		r, dw, err := b.consumer.Redelivery(ctx)
		if err != nil {
			return err
		}
		redelivery, dupWindow = &r, dw
	}
	policy, err := pruning.Policy(ctx, tc, namespace, cfg.Retention, redelivery, dupWindow)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadConfig, err)
	}
	if policy, err = pruning.WithQuarantine(policy, cfg.QuarantineRetention); err != nil {
		return fmt.Errorf("%w: %w", errBadConfig, err)
	}
	logger.Info("retention is safe", "retention", policy.Keep.String(), "quarantine_retention", policy.Quarantine.String(), "horizon", policy.Horizon.String())
	metrics.RegisterRetentionHeadroom(reg, policy.Keep, policy.Horizon.Total)
	metrics.RegisterBacklog(reg, st, 2*time.Second, logger)

	// The drain timeout covers the whole shutdown: the effects in flight
	// get three quarters of it, the Temporal worker's own stop (pollers,
	// tasks that still hold a slot) the last quarter.
	stopTimeout := cfg.DrainTimeout / 4
	w := worker.New(tc, cfg.TaskQueue, worker.Options{WorkerStopTimeout: stopTimeout})
	wfs.Register(w)
	drain := &activities.Drainer{}
	activities.Register(w, &activities.Activities{
		Store:       st,
		Payments:    payments,
		Mailer:      mailer,
		EmailPolicy: cfg.EmailPolicy,
		Retention:   policy,
		Drain:       drain,
		Metrics:     m,
		ResendGrace: cfg.EmailResendGrace,
	})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()
	logger.Info("worker polling", "task_queue", cfg.TaskQueue)
	// Without the schedule nothing is pruned, and the tables grow; that is
	// no reason to stop taking messages. The next worker start tries again.
	if _, err := pruning.EnsureSchedule(ctx, tc, pruning.ScheduleConfig{Every: cfg.PruneEvery, TaskQueue: cfg.TaskQueue}); err != nil {
		logger.Error("pruning schedule could not be created or updated; records are not pruned until a worker start succeeds", "error", err.Error())
	}

	dispatcher, err := intake.NewDispatcher(in, intake.DispatcherConfig{Logger: logger})
	if err != nil {
		return err
	}
	// The health listener outlives the intake: during the drain /readyz
	// answers 503 (check "shutdown") and /metrics still shows the effects
	// finishing.
	var draining atomic.Bool
	if cfg.HealthAddr != "" {
		checks := []health.Check{health.Postgres(st), health.Temporal(tc), {Name: "shutdown", Fn: func(context.Context) error {
			if draining.Load() {
				return errors.New("the worker is draining before it stops")
			}
			return nil
		}}}
		if b != nil {
			checks = append(checks, health.NATS(b.nc))
		}
		hctx, stopHealth := context.WithCancel(context.WithoutCancel(ctx))
		herr := make(chan error, 1)
		go func() { herr <- serveHealth(hctx, cfg.HealthAddr, health.New(0, checks...), reg, logger) }()
		defer func() {
			stopHealth()
			if err := <-herr; err != nil {
				logger.Debug("health listener stopped", "error", err.Error())
			}
		}()
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			if err := <-herr; err != nil {
				cancel(err)
			}
			herr <- nil
		}()
	}
	// From SIGTERM on, /readyz says the worker is going away.
	defer context.AfterFunc(ctx, func() { draining.Store(true) })()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return dispatcher.Run(gctx) })
	if b != nil {
		g.Go(func() error { return b.consumer.Run(gctx) })
		g.Go(func() error { return b.relay.Run(gctx) })
	}
	if cfg.Webhooks.Enabled() {
		hooks, err := newWebhooks(cfg, st, tc, reg, logger)
		if err != nil {
			return fmt.Errorf("%w: %w", errBadConfig, err)
		}
		g.Go(func() error { return serveWebhooks(gctx, cfg.WebhookAddr, hooks, logger) })
	}
	if cfg.PprofAddr != "" {
		g.Go(func() error { return servePprof(gctx, cfg.PprofAddr, logger) })
	}
	if codecServer != nil {
		g.Go(func() error { return codec.Serve(gctx, codecServer.addr, codecServer.h, logger) })
	}
	err = g.Wait()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause // the health listener failed
	}
	logger.Info("intake stopped", "dispatcher", dispatcher.Stats())
	if b != nil {
		logger.Info("broker intake stopped", "consumer", b.consumer.Stats(), "outbox", b.relay.Stats())
	}
	shutdown(w, drain, cfg.DrainTimeout-stopTimeout, logger)
	return err
}

// shutdown stops the Temporal worker without cutting an effect in half. The
// SDK cancels in-flight local activities the moment the worker stops, so
// the effects are drained first: drain is closed (an effect that starts now
// fails retryably before it claims anything, and runs elsewhere), the ones
// in flight get up to wait to finish their provider call and their record,
// and only then is the worker stopped. An effect still running then keeps
// going on its own context until the process exits; if it has not recorded
// by then, its retry replays it from the ledger or the provider's key.
func shutdown(w worker.Worker, drain *activities.Drainer, wait time.Duration, logger *slog.Logger) {
	start := time.Now()
	inFlight := drain.InFlight()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if left, err := drain.Wait(ctx); err != nil {
		logger.Warn("drain timed out: effects still in flight go to the retry path", "in_flight", left, "drain_timeout", wait.String())
	} else {
		logger.Info("effects drained", "in_flight_at_start", inFlight, "took", time.Since(start).Round(time.Millisecond).String())
	}
	w.Stop()
	logger.Info("temporal worker stopped", "took", time.Since(start).Round(time.Millisecond).String())
}

// newWebhooks builds the providers' webhook handler (see docs/webhooks.md).
// Its counter goes to reg, the registry /metrics serves.
func newWebhooks(cfg config.Config, st *store.Store, tc webhook.Signaler, reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	m, err := webhook.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("webhook metrics: %w", err)
	}
	wcfg := cfg.Webhooks
	wcfg.Logger = logger
	return webhook.New(st, tc, m, wcfg)
}

// codecServer is the optional HTTP codec server that lets an authorised
// operator's Temporal UI or CLI decrypt payloads.
type codecServerConfig struct {
	addr string
	h    http.Handler
}

// newCodecServer builds it from the configuration, with the keyring the
// Temporal client encrypts with (loaded once, by internal/config) and the
// same rule for plaintext payloads (EFFECTIVELY_CODEC_REQUIRE).
func newCodecServer(cfg config.Config) (*codecServerConfig, error) {
	scfg := cfg.CodecServer
	if !scfg.Enabled() {
		return nil, nil
	}
	if cfg.Temporal.Keys == nil {
		return nil, fmt.Errorf("%s needs %s or %s", codec.EnvServerAddr, codec.EnvKeys, codec.EnvKeyFile)
	}
	h, err := codec.NewServerHandler(codec.NewCodec(cfg.Temporal.Keys, codec.RequireEncryption(cfg.Temporal.RequireEncryption)), scfg.Origins, scfg.Token)
	if err != nil {
		return nil, err
	}
	return &codecServerConfig{addr: scfg.Addr, h: h}, nil
}

// broker is the worker's JetStream side.
type broker struct {
	nc       *nats.Conn
	consumer *intake.Consumer
	relay    *outbox.Relay
}

// connectBroker connects to NATS, creates the streams that are missing and
// creates or updates the durable consumer. Nothing is fetched yet.
func connectBroker(ctx context.Context, cfg config.Config, in *intake.Intake, logger *slog.Logger) (*broker, error) {
	n := cfg.NATS
	nc, err := n.Connect("effectively-worker", nats.MaxReconnects(-1),
		// Keep reconnecting when the server refuses the credential twice in
		// a row (nats.go gives up then by default): during a rotation the
		// server may take the new password or token before the file holds
		// it, and the file is read again at each attempt.
		nats.IgnoreAuthErrorAbort(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Warn("nats error", "error", err.Error())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { logger.Info("nats reconnected") }))
	if err != nil {
		return nil, fmt.Errorf("connect to nats (NATS_URL, or off to disable; credential %s, tls %s): %w", n.Auth.Method(), n.Auth.TLS(), err)
	}
	b := &broker{nc: nc}
	fail := func(err error) (*broker, error) {
		b.close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	// Streams the worker creates drop messages older than the retention, so
	// that a replay of the stream never meets a message whose record was
	// pruned, and refuse a message larger than the intake accepts
	// (intake.MaxStreamMsgSize). An existing stream is the broker owner's:
	// warn only, never change it.
	for _, spec := range []intake.StreamSpec{
		{Name: n.JetStream.Stream, Subjects: []string{n.JetStream.Subject}, Duplicates: n.DuplicateWindow, MaxAge: cfg.Retention},
		{Name: n.EventsStream, Subjects: []string{n.EventsPrefix + ".>"}, Duplicates: n.DuplicateWindow, MaxAge: cfg.Retention},
	} {
		s, created, err := intake.EnsureStream(ctx, js, spec)
		if err != nil {
			return fail(err)
		}
		if created {
			logger.Info("created stream", "stream", spec.Name, "subjects", spec.Subjects, "max_age", spec.MaxAge.String(),
				"max_msg_size", intake.MaxStreamMsgSize)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			continue
		}
		if info.Config.MaxAge == 0 || info.Config.MaxAge > cfg.Retention {
			logger.Warn("stream keeps messages longer than the retention: replaying it through a new consumer would run messages whose records were pruned",
				"stream", spec.Name, "max_age", info.Config.MaxAge.String(), "retention", cfg.Retention.String())
		}
		if intake.LooseMessageLimit(info.Config) {
			logger.Warn("stream stores messages larger than the intake accepts: an oversized one is delivered and quarantined as too_large (size, SHA-256, first 1 KiB) instead of being refused by the broker; set the stream's max_msg_size",
				"stream", spec.Name, "max_msg_size", info.Config.MaxMsgSize, "limit", intake.MaxStreamMsgSize)
		}
	}
	jsCfg := n.JetStream
	jsCfg.Logger = logger
	if b.consumer, err = intake.NewConsumer(ctx, in, js, jsCfg); err != nil {
		return fail(err)
	}
	if b.relay, err = outbox.New(in.Store(), js, outbox.Config{Stream: n.EventsStream, SubjectPrefix: n.EventsPrefix, Logger: logger}); err != nil {
		return fail(err)
	}
	return b, nil
}

// close flushes what is buffered (acks, publishes) and closes the connection.
func (b *broker) close() {
	_ = b.nc.FlushTimeout(5 * time.Second)
	b.nc.Close()
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
