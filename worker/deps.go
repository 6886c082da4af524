package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/workflows"
)

// deps is everything the worker runs on, built once by buildDeps from the
// configuration; close releases it in the reverse order.
type deps struct {
	// namespace is the Temporal namespace the worker runs in.
	namespace   string
	reg         *prometheus.Registry // the worker's and the SDK's metrics, served at /metrics
	pool        *pgxpool.Pool
	store       *store.Store
	tc          client.Client
	workflows   *workflows.Workflows
	activities  *activities.Activities
	dispatcher  *intake.Dispatcher
	broker      *broker            // nil with NATS_URL=off
	sources     []intake.Source    // EFFECTIVELY_SOURCES, built by buildSources
	relay       *outbox.Relay      // OUTBOX_BROKER's; nil without a broker
	webhooks    http.Handler       // nil without a webhook secret or key
	api         *httpapi.API       // nil without EFFECTIVELY_API_ADDR
	codecServer *codecServerConfig // nil without EFFECTIVELY_CODEC_SERVER_ADDR
	consumers   []string           // the routes' consumers: each has an effect queue (routeWorkers)
	closers     []func()
}

// close releases what buildDeps opened, last opened first.
func (d *deps) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

func (d *deps) onClose(f func()) { d.closers = append(d.closers, f) }

// buildDeps opens Postgres (migrating it and guarding the key namespace),
// the provider clients, tracing, Temporal, the intake and, with a broker,
// JetStream, and checks the retention against the redelivery horizon. It
// always returns a deps to close, also with an error.
func buildDeps(ctx context.Context, cfg config.Config, logger *slog.Logger) (*deps, error) {
	d := &deps{reg: prometheus.NewRegistry()}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(d.reg)
	temporalMetrics, closeTemporalMetrics := metrics.TemporalHandler(d.reg)
	d.onClose(func() { _ = closeTemporalMetrics.Close() })
	var err error
	if d.workflows, err = workflows.New(cfg.Workflows); err != nil {
		return d, err
	}
	d.pool, err = store.Open(ctx, cfg.DatabaseURL, store.PoolConfig{MaxConns: int32(cfg.DatabaseMaxConns)}) //nolint:gosec // validated: 4 to 1000
	if err != nil {
		return d, err
	}
	d.onClose(d.pool.Close)
	if err := store.Migrate(ctx, d.pool, logger); err != nil {
		return d, err
	}
	// Before /readyz, a quarter of the pool, after the migrations (it runs
	// the rate limiter's function). A failure costs only the warm-up: the
	// first statements meet its cause again and report it.
	if err := store.Warm(ctx, d.pool, int32(cfg.DatabaseMaxConns/4)); err != nil { //nolint:gosec // validated: 4 to 1000
		logger.Warn("postgres pool not warmed; its first statements open their connections and compile the rate limiter's function", "error", err.Error())
	}
	if err := guardKeyNamespace(ctx, d.pool, cfg.KeyNamespace, logger); err != nil {
		return d, err
	}
	// The provider clients' requests are timed by provider, operation and
	// status class.
	cfg.Stripe.HTTPClient = m.InstrumentClient(metrics.ProviderStripe, cfg.Stripe.HTTPClient)
	cfg.Email.HTTPClient = m.InstrumentClient(metrics.ProviderSendGrid, &http.Client{Timeout: cfg.Email.Timeout})
	// Every worker paces its provider calls under the same limits, kept in
	// Postgres; a 429 that still comes through pauses them all. lines
	// learns from those reservations how far ahead each route's line runs,
	// for the intake's hold (EFFECTIVELY_START_AHEAD).
	lines := ratelimit.NewLines()
	if cfg.Stripe.Limit, err = ratelimit.Wrap(store.New(d.pool), ratelimit.Config{Provider: metrics.ProviderStripe,
		Global: cfg.RateLimits.Stripe, Endpoint: cfg.RateLimits.StripeEndpoint, Observer: m, Lines: lines}); err != nil {
		return d, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	if cfg.Email.Limit, err = ratelimit.Wrap(store.New(d.pool), ratelimit.Config{Provider: metrics.ProviderSendGrid,
		Global: cfg.RateLimits.SendGrid, Observer: m, Lines: lines}); err != nil {
		return d, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	payments, err := payment.New(cfg.Stripe)
	if err != nil {
		return d, fmt.Errorf("stripe client: %w", err)
	}
	mailer, err := email.New(cfg.Email)
	if err != nil {
		return d, fmt.Errorf("sendgrid client: %w", err)
	}
	// Before /readyz: a start's first charge, refund and receipt should
	// not build the clients' codec caches while a backlog comes in. A
	// failure costs only that.
	if err := errors.Join(payments.Warm(), mailer.Warm()); err != nil {
		logger.Warn("provider clients not warmed; their first calls build their caches", "error", err.Error())
	}
	if d.codecServer, err = newCodecServer(cfg); err != nil {
		return d, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	interceptors, err := setupTracing(ctx, d, logger)
	if err != nil {
		return d, err
	}
	tc, namespace, err := temporalclient.DialWithMetrics(ctx, cfg.Temporal, logger, temporalMetrics, interceptors...)
	if err != nil {
		return d, err
	}
	d.tc = tc
	d.onClose(tc.Close)
	// Operators find a message's workflow by these attributes; starts that
	// set them fail while they are unregistered.
	if err := temporalclient.EnsureSearchAttributes(ctx, tc, namespace, workflows.SearchAttributeKeys()); err != nil {
		var conflict *temporalclient.TypeConflictError
		if errors.As(err, &conflict) {
			return d, fmt.Errorf("%w: %w", errBadConfig, err)
		}
		logger.Warn("search attributes", "error", err.Error())
	}
	d.namespace = namespace
	d.store = store.New(d.pool)
	in, err := intake.New(d.store, tc, intake.Config{TaskQueue: cfg.TaskQueue, Logger: logger, EagerStart: true, Metrics: m, StartRate: cfg.RouteStartRate(),
		Lines: lines, LineAhead: cfg.StartAhead})
	if err != nil {
		return d, err
	}
	for _, r := range in.Routes().Routes() {
		d.consumers = append(d.consumers, r.Consumer)
	}
	// The broker comes before the Temporal worker: the retention check
	// needs the consumer's configuration, and nothing may run before it.
	if cfg.NATS.Enabled() {
		if d.broker, err = connectBroker(ctx, cfg, in, logger); err != nil {
			return d, err
		}
		d.onClose(d.broker.close)
		d.relay = d.broker.relay
	}
	switch cfg.OutboxBroker {
	case config.OutboxKafka:
		if d.relay, err = kafkaRelay(cfg, in, logger, d.onClose); err != nil {
			return d, err
		}
	case config.OutboxRabbitMQ:
		if d.relay, err = rabbitMQRelay(cfg, in, logger, d.onClose); err != nil {
			return d, err
		}
	}
	if d.sources, err = buildSources(ctx, cfg, in, d.broker, m, logger); err != nil {
		return d, err
	}
	policy, err := retentionPolicy(ctx, cfg, tc, namespace, d.sources)
	if err != nil {
		return d, err
	}
	logger.Info("retention is safe", "retention", policy.Keep.String(), "quarantine_retention", policy.Quarantine.String(), "horizon", policy.Horizon.String())
	metrics.RegisterRetentionHeadroom(d.reg, policy.Keep, policy.Horizon.Total)
	metrics.RegisterBacklog(d.reg, d.store, 2*time.Second, logger)
	d.activities = &activities.Activities{
		Store:       d.store,
		Payments:    payments,
		Mailer:      mailer,
		EmailPolicy: cfg.EmailPolicy,
		Retention:   policy.Prune(),
		Drain:       &activities.Drainer{},
		Metrics:     m,
		ResendGrace: cfg.EmailResendGrace,
	}
	// The audit reads Stripe's lists with the same client; receipts are
	// compared with SendGrid's events only when the Event Webhook brings them.
	if d.activities.Auditor, err = audit.New(d.store, payments, audit.Config{
		MaxRequests: cfg.AuditMaxRequests, Receipts: cfg.Webhooks.SendGridPublicKey != "",
	}); err != nil {
		return d, err
	}
	if d.dispatcher, err = intake.NewDispatcher(in, intake.DispatcherConfig{Logger: logger}); err != nil {
		return d, err
	}
	if cfg.API.Enabled() {
		acfg := cfg.API
		acfg.Logger = logger
		if d.api, err = httpapi.New(in, tc, d.reg, acfg); err != nil {
			return d, fmt.Errorf("%w: %w", errBadConfig, err)
		}
	}
	if cfg.Webhooks.Enabled() {
		if d.webhooks, err = newWebhooks(cfg, d.store, tc, d.reg, logger); err != nil {
			return d, fmt.Errorf("%w: %w", errBadConfig, err)
		}
	}
	return d, nil
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

// setupTracing starts tracing (off unless OTEL_TRACES_EXPORTER or an OTLP
// endpoint is set) before the Temporal client, whose interceptor carries the
// traces, and returns that interceptor when tracing is on.
func setupTracing(ctx context.Context, d *deps, logger *slog.Logger) ([]interceptor.ClientInterceptor, error) {
	shutdownTracing, tracingOn, err := tracing.Setup(ctx, config.OTelLookup, "effectively-worker")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	d.onClose(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flushing traces", "error", err.Error())
		}
	})
	if !tracingOn {
		return nil, nil
	}
	ti, err := tracing.TemporalInterceptor()
	if err != nil {
		return nil, err
	}
	logger.Info("tracing on: spans are exported over OTLP (OTEL_* variables)")
	return []interceptor.ClientInterceptor{ti}, nil
}

// retentionPolicy checks RETENTION and QUARANTINE_RETENTION against the
// redelivery horizon (the longest of the sources', when there are any); a
// retention that is too short, or a source without a horizon, is bad
// configuration.
func retentionPolicy(ctx context.Context, cfg config.Config, tc client.Client, namespace string, sources []intake.Source) (retention.Policy, error) {
	var horizons []retention.SourceHorizon
	for _, s := range sources {
		h, err := s.Horizon(ctx)
		if errors.Is(err, retention.ErrNoHorizon) {
			return retention.Policy{}, fmt.Errorf("%w: source %s: %w", errBadConfig, s.Name(), err)
		}
		if err != nil {
			return retention.Policy{}, fmt.Errorf("source %s: %w", s.Name(), err)
		}
		horizons = append(horizons, h)
	}
	policy, err := retention.ReadPolicy(ctx, tc, namespace, cfg.Retention, horizons...)
	if err != nil {
		return retention.Policy{}, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	if policy, err = retention.WithQuarantine(policy, cfg.QuarantineRetention); err != nil {
		return retention.Policy{}, fmt.Errorf("%w: %w", errBadConfig, err)
	}
	return policy, nil
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

// broker is the worker's NATS side: the connection, JetStream (the
// jetstream source's, when configured) and the outbox relay.
type broker struct {
	nc    *nats.Conn
	js    natsjs.JetStream
	relay *outbox.Relay
}

// connectBroker connects to NATS, creates the streams that are missing and
// builds the outbox relay. Nothing is fetched or relayed yet.
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
	js, err := natsjs.New(nc)
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	b.js = js
	// Streams the worker creates drop messages older than the retention, so
	// that a replay of the stream never meets a message whose record was
	// pruned, and refuse a message larger than the intake accepts
	// (jetstream.MaxStreamMsgSize). An existing stream is the broker owner's:
	// jetstream.EnsureStreams warns only, never changes it.
	if err := jetstream.EnsureStreams(ctx, js, logger,
		jetstream.StreamSpec{Name: n.JetStream.Stream, Subjects: []string{n.JetStream.Subject}, Duplicates: n.DuplicateWindow, MaxAge: cfg.Retention},
		jetstream.StreamSpec{Name: n.EventsStream, Subjects: []string{n.EventsPrefix + ".>"}, Duplicates: n.DuplicateWindow, MaxAge: cfg.Retention},
	); err != nil {
		return fail(err)
	}
	if cfg.OutboxBroker != config.OutboxNATS {
		return b, nil // the relay publishes to Kafka or RabbitMQ (OUTBOX_BROKER)
	}
	pub := outbox.NewJetStreamPublisher(js, outbox.JetStreamConfig{Stream: n.EventsStream, SubjectPrefix: n.EventsPrefix})
	if b.relay, err = outbox.New(in.Store(), pub, outbox.Config{Logger: logger}); err != nil {
		return fail(err)
	}
	return b, nil
}

// close flushes what is buffered (acks, publishes) and closes the connection.
func (b *broker) close() {
	_ = b.nc.FlushTimeout(5 * time.Second)
	b.nc.Close()
}
