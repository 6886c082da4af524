// Package config is the one place the worker and the starter read the
// environment. One table of variables (variables.go) gives each variable's
// field, default, check and doc line: it drives LoadEnv, Validate's errors
// (which name the variable), Names and the table in docs/configuration.md,
// which a test regenerates. The Temporal connection is read here too,
// through Temporal's own envconfig, and the payload keyring is loaded here
// once and shared by the Temporal client and the codec server.
// Secrets (API keys, tokens, keys) are read here and never logged: the
// LogValue method redacts them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/workflows"
)

// Lookup reads one environment variable; os.LookupEnv in production.
type Lookup func(name string) (string, bool)

// EnvKeyNamespace names the key namespace's variable (Config.KeyNamespace).
const EnvKeyNamespace = "EFFECTIVELY_KEY_NAMESPACE"

// EnvSources names the kinds of source the worker runs.
const EnvSources = "EFFECTIVELY_SOURCES"

// Env is an environment Load reads: LookupEnv reads one variable, Environ
// lists them all (Temporal's envconfig scans it for TEMPORAL_GRPC_META_*).
type Env interface {
	LookupEnv(name string) (string, bool)
	Environ() []string
}

// RateLimits are the providers' rate limits, shared by every worker
// through Postgres (internal/adapter/ratelimit). A zero Rate is none.
type RateLimits struct {
	// Stripe bounds all Stripe requests of the account (Stripe: 100/s live,
	// 25/s sandbox).
	Stripe ratelimit.Rate
	// StripeEndpoint bounds each Stripe endpoint (Stripe: 25/s each).
	StripeEndpoint ratelimit.Rate
	// SendGrid bounds the Mail Send requests of the API key.
	SendGrid ratelimit.Rate
}

// Config is everything the worker and the starter read from the
// environment. Each field names its variable; the defaults and checks are
// the table of variables' (variables.go), shown in docs/configuration.md.
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL).
	DatabaseURL string
	// DatabaseMaxConns bounds the worker's Postgres pool, which the
	// intake, the dispatcher, the relay and the activities share (DATABASE_MAX_CONNS).
	DatabaseMaxConns int
	// TaskQueue is the Temporal task queue of both processes (EFFECTIVELY_TASK_QUEUE).
	TaskQueue string
	// StartRate paces each route's workflow starts, shared by every worker
	// process (EFFECTIVELY_START_RATE); negative is auto (RouteStartRate).
	StartRate float64
	// StartAhead holds a route's starts while its requests at the shared
	// rate limits are reserved further ahead (EFFECTIVELY_START_AHEAD;
	// intake.Config.LineAhead). Zero: no hold.
	StartAhead time.Duration
	// RouteEffectSlots bounds the effect activities a worker runs at once
	// for each route's queue (EFFECTIVELY_ROUTE_EFFECT_SLOTS).
	RouteEffectSlots int
	// KeyNamespace scopes the provider keys and tags the provider objects
	// (EFFECTIVELY_KEY_NAMESPACE); LoadEnv copies it into Stripe, Email and
	// Webhooks. Read docs/configuration.md#key-namespace before changing it.
	KeyNamespace string
	// Stripe configures the Stripe client (STRIPE_API_KEY, STRIPE_BASE_URL).
	Stripe payment.Config
	// Email configures the SendGrid client (SENDGRID_API_KEY,
	// SENDGRID_BASE_URL, EMAIL_FROM, EMAIL_FROM_NAME; Timeout email.DefaultTimeout).
	Email email.Config
	// RateLimits pace the provider calls of every worker together
	// (STRIPE_RATE_LIMIT, STRIPE_ENDPOINT_RATE_LIMIT, SENDGRID_RATE_LIMIT).
	RateLimits RateLimits
	// EmailPolicy is at-least-once or at-most-once (EMAIL_POLICY).
	EmailPolicy store.EmailPolicy
	// Workflows holds the activity timeouts (PAYMENT_*, EMAIL_*_TO_CLOSE,
	// LOCAL_START_TO_CLOSE); its defaults are workflows.DefaultConfig's.
	Workflows workflows.Config
	// HealthAddr serves /livez, /readyz, /healthz and /metrics
	// (EFFECTIVELY_HEALTH_ADDR); "" is off.
	HealthAddr string
	// DrainTimeout bounds the graceful shutdown on SIGTERM or SIGINT; what
	// outlives it goes to the retry path (EFFECTIVELY_DRAIN_TIMEOUT).
	DrainTimeout time.Duration
	// PprofAddr serves Go's profiles at /debug/pprof/, on loopback only
	// (EFFECTIVELY_PPROF_ADDR); "" is off.
	PprofAddr string
	// LogLevel is debug, info, warn or error (LOG_LEVEL).
	LogLevel slog.Level
	// NATS configures intake from JetStream and the outbox relay.
	NATS NATS
	// RabbitMQ configures the RabbitMQ source (RABBITMQ_*); off by default.
	RabbitMQ RabbitMQ
	// Sources are the kinds of source the worker runs, each once
	// (EFFECTIVELY_SOURCES; SourceJetStream unless NATS_URL is off).
	Sources []string
	// Kafka configures intake from Kafka and its outbox producer.
	Kafka Kafka
	// OutboxBroker is where the outbox relay publishes (OUTBOX_BROKER).
	OutboxBroker string
	// Retention is how long processed-message, dispatched inbox and published
	// outbox rows are kept (RETENTION); never less than the redelivery horizon.
	Retention time.Duration
	// QuarantineRetention is how long a quarantine row is kept after its
	// message's last copy (QUARANTINE_RETENTION); by default never below Retention.
	QuarantineRetention time.Duration
	// PruneEvery is the interval of the pruning schedule (PRUNE_EVERY).
	PruneEvery time.Duration
	// AuditEvery is the interval of the audit schedule (AUDIT_EVERY).
	AuditEvery time.Duration
	// AuditMaxRequests bounds the Stripe requests of one audit run
	// (AUDIT_MAX_REQUESTS).
	AuditMaxRequests int
	// WebhookAddr serves /webhooks/stripe and /webhooks/sendgrid
	// (EFFECTIVELY_WEBHOOK_ADDR) when Webhooks has a secret or a key; "" is off.
	WebhookAddr string
	// Webhooks verifies the providers' events (STRIPE_WEBHOOK_SECRETS,
	// STRIPE_WEBHOOK_TOLERANCE, SENDGRID_WEBHOOK_PUBLIC_KEY,
	// SENDGRID_WEBHOOK_TOLERANCE); see docs/webhooks.md.
	Webhooks webhook.Config
	// API is the HTTP intake (EFFECTIVELY_API_*); off without an address.
	API httpapi.Config
	// EmailResendGrace is how long a receipt retry after a possible send
	// waits for SendGrid's event (EMAIL_RESEND_GRACE; DefaultEmailResendGrace
	// with a SendGrid key, else 0); shorter than EMAIL_START_TO_CLOSE.
	EmailResendGrace time.Duration
	// Temporal is the connection (Temporal's envconfig: TEMPORAL_*,
	// temporal.toml; EFFECTIVELY_GRPC_COMPRESSION) and the payload keyring,
	// loaded once (EFFECTIVELY_CODEC_KEYS or _KEY_FILE, EFFECTIVELY_CODEC_REQUIRE).
	Temporal temporalclient.Config
	// CodecServer is the worker's optional codec server, which decrypts with
	// Temporal.Keys (EFFECTIVELY_CODEC_SERVER_ADDR, _TOKEN, _CORS_ORIGINS).
	CodecServer codec.ServerConfig

	// PublicListenerNames are the listeners, of health, webhook and codec,
	// that may bind beyond loopback (EFFECTIVELY_PUBLIC_LISTENERS).
	PublicListenerNames []string
	// AllowPublicListeners lets all three bind beyond loopback, each with a
	// warning at start; pprof never (EFFECTIVELY_ALLOW_PUBLIC_LISTENERS).
	AllowPublicListeners bool
	// AllowInsecureProviderURLs lets SENDGRID_BASE_URL use plain http beyond
	// loopback (EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS).
	AllowInsecureProviderURLs bool

	// logLevelSet records whether LOG_LEVEL was given, for LogLevelOr.
	logLevelSet bool
}

// LogLevelOr returns LogLevel when LOG_LEVEL is set and def otherwise: the
// starter, whose output is its JSON lines, logs only warnings by default.
func (c Config) LogLevelOr(def slog.Level) slog.Level {
	if c.logLevelSet {
		return c.LogLevel
	}
	return def
}

// ShutdownTimeouts splits DrainTimeout, which covers the whole shutdown:
// the effects in flight get three quarters of it, the Temporal worker's own
// stop (pollers, tasks that still hold a slot) the last quarter.
func (c Config) ShutdownTimeouts() (effects, workerStop time.Duration) {
	workerStop = c.DrainTimeout / 4
	return c.DrainTimeout - workerStop, workerStop
}

// DefaultEmailResendGrace is EmailResendGrace's default with a SendGrid key.
const DefaultEmailResendGrace = 30 * time.Second

// NATS configures the broker side: the JetStream consumer the worker takes
// messages from, the streams it creates when missing, and where the outbox
// relay publishes events. The starter's publish command reads it too.
type NATS struct {
	// URL of the NATS server (NATS_URL); "" is off: no consumer, no relay.
	URL string
	// JetStream is the consumer (NATS_STREAM, NATS_SUBJECT, NATS_CONSUMER,
	// NATS_ACK_WAIT, NATS_BACKOFF, NATS_MAX_DELIVER, NATS_HANDLERS, NATS_STARTERS).
	JetStream jetstream.Config
	// PerRoute runs a durable consumer per route beside JetStream's
	// (NATS_CONSUMER_PER_ROUTE): each route's messages come in their own
	// stream order, not behind another route's backlog.
	PerRoute bool
	// RouteWait keeps a route's backlog in its own consumer
	// (NATS_ROUTE_BACKLOG_WAITS, with PerRoute, which turns it on unless
	// it is given): intake.PathConfig.OneRoute.
	RouteWait bool
	// DuplicateWindow is the deduplication window of a stream the worker
	// creates (NATS_DUPLICATE_WINDOW); an existing stream keeps its own.
	DuplicateWindow time.Duration
	// EventsStream is the stream of outbox events (NATS_EVENTS_STREAM).
	EventsStream string
	// EventsPrefix prefixes an event's topic to form its subject (NATS_EVENTS_PREFIX).
	EventsPrefix string
	// Auth is the credential and TLS files both processes connect with
	// (NATS_USER … NATS_TLS_KEY_FILE); Connect and Options apply it.
	Auth NATSAuth
}

// Enabled reports whether the broker side runs at all.
func (n NATS) Enabled() bool { return n.URL != "" }

// Source kinds of EFFECTIVELY_SOURCES.
const (
	// SourceJetStream consumes the NATS_* durable consumer.
	SourceJetStream = "jetstream"
	// SourceKafka consumes a Kafka consumer group (KAFKA_*).
	SourceKafka = "kafka"
	// SourceRabbitMQ consumes a RabbitMQ quorum queue (RABBITMQ_*).
	SourceRabbitMQ = "rabbitmq"
)

// SourceKinds are the kinds EFFECTIVELY_SOURCES names; AvailableSources
// those this build runs.
var (
	SourceKinds      = []string{SourceJetStream, SourceKafka, SourceRabbitMQ}
	AvailableSources = []string{SourceJetStream, SourceRabbitMQ}
)

// HasSource reports whether kind is among the configured sources.
func (c Config) HasSource(kind string) bool { return slices.Contains(c.Sources, kind) }

// DefaultNATSURL is the NATS server used when NATS_URL is not set.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// DefaultRetention is how long records are kept when RETENTION is not set.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultQuarantineRetention is how long quarantine rows are kept when
// QUARANTINE_RETENTION is not set (or RETENTION, when that is longer).
const DefaultQuarantineRetention = 30 * 24 * time.Hour

// DefaultDrainTimeout bounds the graceful shutdown when
// EFFECTIVELY_DRAIN_TIMEOUT is not set.
const DefaultDrainTimeout = 20 * time.Second

// DefaultDatabaseMaxConns is the worker's Postgres pool size.
const DefaultDatabaseMaxConns = 32

// RouteStartRate is the pace of each route's workflow starts, shared by
// every worker process (intake.Config.StartRate): StartRate, or with auto
// AutoStartFactor times the paid messages per second the provider limits
// allow (a create and a confirm, two Stripe endpoints; one mail), 0 when no
// limit is set.
func (c Config) RouteStartRate() float64 {
	if c.StartRate >= 0 {
		return c.StartRate
	}
	var tightest float64
	for _, r := range []float64{c.RateLimits.StripeEndpoint.PerSecond, c.RateLimits.Stripe.PerSecond / 2, c.RateLimits.SendGrid.PerSecond} {
		if r > 0 && (tightest == 0 || r < tightest) {
			tightest = r
		}
	}
	return AutoStartFactor * tightest
}

// AutoStartFactor is how much faster than the providers' limits admit a
// route's starts go with EFFECTIVELY_START_RATE=auto: enough for the line
// at the limits to reach EFFECTIVELY_START_AHEAD and hold the rest, not
// so much that the starts run far ahead of it. Measured with 2 workers
// (docs/operations.md): 1.25× drained at 92–97% of the limit, 1× at 90%,
// 2× at 100% with the other routes' latency 2–3 times 1.25×'s.
const AutoStartFactor = 1.25

// DefaultStartAhead is EFFECTIVELY_START_AHEAD's default: half the
// longest wait of a local attempt at the limit (activities.LocalRateWait),
// so that a held backlog's charges keep to the fast local path while the
// line stays long enough never to run dry between starts.
const DefaultStartAhead = 500 * time.Millisecond

// DefaultRouteEffectSlots is EFFECTIVELY_ROUTE_EFFECT_SLOTS' default: with
// two workers, 200 effects in flight per route, which at Stripe's sandbox
// limit (25 per second an endpoint) is 8 s of the limiter's line.
const DefaultRouteEffectSlots = 100

// OTelLookup reads the OpenTelemetry variables (OTEL_*) from the process
// environment for internal/leaf/tracing, and nothing else: they are the
// standard ones the OpenTelemetry SDK and its OTLP exporters define, listed
// in docs/configuration.md#tracing rather than in the table.
func OTelLookup(name string) (string, bool) {
	if !strings.HasPrefix(name, "OTEL_") {
		return "", false
	}
	return envconfig.EnvLookupOS.LookupEnv(name)
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return LoadEnv(envconfig.EnvLookupOS) }

// Load reads the configuration through lookup. Temporal's
// TEMPORAL_GRPC_META_* variables need the whole environment: use LoadEnv
// for them.
func Load(lookup Lookup) (Config, error) { return LoadEnv(lookupEnv(lookup)) }

// lookupEnv is an Env that can look variables up but not list them.
type lookupEnv Lookup

func (l lookupEnv) LookupEnv(name string) (string, bool) { return l(name) }
func (lookupEnv) Environ() []string                      { return nil }

// LoadEnv reads the configuration from env: the table of variables
// (variables.go), then NATS authentication and the Temporal connection.
func LoadEnv(env Env) (Config, error) {
	var c Config
	c.Email.Timeout = email.DefaultTimeout // no variable: the worker's HTTP client takes it from here
	errs := c.loadTable(env)
	get := func(name, def string) string {
		if v, ok := env.LookupEnv(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	auth, authErrs := loadNATSAuth(get, c.NATS.URL)
	c.NATS.Auth = auth
	errs = append(errs, authErrs...)
	if err := c.loadTemporal(env); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// loadTemporal reads the Temporal connection, the payload keyring (once) and
// the codec server's settings.
func (c *Config) loadTemporal(env Env) error {
	var errs []error
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{EnvLookup: env})
	if err != nil {
		errs = append(errs, fmt.Errorf("temporal client configuration (TEMPORAL_* variables, temporal.toml): %w", err))
	}
	v, _ := env.LookupEnv(temporalclient.EnvCompression)
	if opts.ConnectionOptions.GrpcCompression, err = temporalclient.Compression(strings.TrimSpace(v), opts.HostPort); err != nil {
		errs = append(errs, err)
	}
	c.Temporal.Options = opts
	keys, keysOn, keysErr := codec.LoadKeyring(env.LookupEnv)
	if keysErr != nil {
		errs = append(errs, keysErr)
	} else if keysOn {
		c.Temporal.Keys = keys
	}
	if v, _ := env.LookupEnv(codec.EnvRequire); strings.TrimSpace(v) != "" {
		require, perr := strconv.ParseBool(strings.TrimSpace(v))
		switch {
		case perr != nil:
			errs = append(errs, fmt.Errorf("%s=%q: use true or false", codec.EnvRequire, v))
		case require && !keysOn && keysErr == nil:
			// Checked here, not in Validate, so that the starter refuses too.
			errs = append(errs, fmt.Errorf("%s=true needs %s or %s: without keys no payload is encrypted, so every one would be refused",
				codec.EnvRequire, codec.EnvKeys, codec.EnvKeyFile))
		}
		c.Temporal.RequireEncryption = require
	}
	if c.CodecServer, err = codec.LoadServerConfig(env.LookupEnv); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Validate checks what the worker needs, naming the variable at fault: the
// table's checks, then what spans several variables.
func (c Config) Validate() error {
	errs := c.checkTable()
	if c.CodecServer.Enabled() && c.Temporal.Keys == nil {
		errs = append(errs, fmt.Errorf("%s needs %s or %s", codec.EnvServerAddr, codec.EnvKeys, codec.EnvKeyFile))
	}
	if c.Stripe.APIKey == "" {
		errs = append(errs, errors.New("STRIPE_API_KEY is not set (use sk_test_… with STRIPE_BASE_URL pointing at the simulator for local runs)"))
	}
	if c.Email.APIKey == "" {
		errs = append(errs, errors.New("SENDGRID_API_KEY is not set"))
	}
	errs = append(errs, c.validateBroker()...)
	errs = append(errs, c.validateKafka()...)
	if err := c.Webhooks.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Webhooks.Enabled() && c.WebhookAddr == "" {
		errs = append(errs, errors.New("EFFECTIVELY_WEBHOOK_ADDR is off but a webhook secret or key is set: unset STRIPE_WEBHOOK_SECRETS/SENDGRID_WEBHOOK_PUBLIC_KEY or give an address"))
	}
	if err := c.API.Validate(); err != nil {
		errs = append(errs, namedByMessage("API.", fmt.Errorf("http intake: %w", err)))
	}
	errs = append(errs, c.validateListeners()...)
	errs = append(errs, c.validateProviderURLs()...)
	if err := c.Workflows.Validate(); err != nil {
		errs = append(errs, namedByMessage("Workflows.", fmt.Errorf("activity timeouts: %w", err)))
	}
	return errors.Join(errs...)
}

// validateBroker checks the NATS URL and the consumer (with
// JetStreamConfig.Validate, its errors named by variable). The retention's
// check against the redelivery horizon needs the broker and Temporal, so the
// worker makes it at start.
func (c Config) validateBroker() []error {
	if !c.NATS.Enabled() {
		return nil
	}
	var errs []error
	// Each URL of a comma-separated list on its own: parsed whole, a list
	// passes whatever follows its first URL. The value is not quoted: it may
	// hold credentials.
	urls := strings.Split(c.NATS.URL, ",")
	for i, one := range urls {
		if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" {
			which := "NATS_URL"
			if len(urls) > 1 {
				which = fmt.Sprintf("NATS_URL (URL %d of %d)", i+1, len(urls))
			}
			errs = append(errs, fmt.Errorf("%s: not a URL such as nats://127.0.0.1:4222 (or off)", which))
		}
	}
	if c.NATS.RouteWait && !c.NATS.PerRoute {
		errs = append(errs, errors.New("NATS_ROUTE_BACKLOG_WAITS needs NATS_CONSUMER_PER_ROUTE=true: only a consumer carrying one route may keep its deliveries waiting"))
	}
	js, subjectOK := c.NATS.JetStream, true
	if err := js.Validate(); err != nil {
		for _, e := range namedByFieldErrors("NATS.JetStream.", err) {
			var fe *jetstream.FieldError
			if errors.As(e, &fe) && fe.Fields[0] == "Subject" {
				subjectOK = false
			}
			if js.MaxDeliver < 1 && errors.As(e, &fe) && fe.Fields[0] == "MaxDeliver" {
				continue // NATS_MAX_DELIVER's own check refused it: not twice
			}
			errs = append(errs, e)
		}
	}
	// The starter publishes a type's messages under the filter.
	if _, err := jetstream.PublishSubject(js.Subject, message.TypeOrderPlaced); err != nil && subjectOK {
		errs = append(errs, fmt.Errorf("NATS_SUBJECT=%q: %w", js.Subject, err))
	}
	return errs
}

// list splits a comma-separated value, dropping empty entries.
func list(v string) []string {
	var out []string
	for _, part := range strings.Split(v, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseDuration is time.ParseDuration that also takes a whole number of
// days, such as 30d.
func parseDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a whole number of days", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// redactURL drops the user information (a user and password, or a token in
// the user part) of every URL in raw, a comma-separated list as NATS_URL
// takes. Each URL is parsed on its own: parsed whole, the list's later URLs
// would land in the first one's path with their credentials intact.
func redactURL(raw string) string {
	if raw == "" {
		return ""
	}
	urls := strings.Split(raw, ",")
	for i, one := range urls {
		urls[i] = redactOne(strings.TrimSpace(one))
	}
	return strings.Join(urls, ",")
}

// redactOne drops the user information of one URL. A URL that does not parse,
// or has an @ that url.Parse did not take for user information (as in
// "user:pw@host:4222", without a scheme), is not echoed at all.
func redactOne(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	if u.User == nil {
		if strings.Contains(raw, "@") {
			return "(redacted)"
		}
		return raw
	}
	u.User = url.User("REDACTED")
	return u.String()
}

// LogValue keeps secrets out of logs: keys are reported as set or not.
func (c Config) LogValue() slog.Value {
	set := func(s string) string {
		if s == "" {
			return "unset"
		}
		return "set"
	}
	base := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	return slog.GroupValue(
		slog.String("task_queue", c.TaskQueue),
		slog.String("key_namespace", base(c.KeyNamespace, "none")),
		slog.Int("database_max_conns", c.DatabaseMaxConns),
		slog.String("stripe_base_url", base(c.Stripe.BaseURL, "https://api.stripe.com")),
		slog.String("stripe_api_key", set(c.Stripe.APIKey)),
		slog.String("sendgrid_base_url", base(c.Email.BaseURL, "https://api.sendgrid.com")),
		slog.String("sendgrid_api_key", set(c.Email.APIKey)),
		slog.String("email_policy", string(c.EmailPolicy)),
		slog.String("health_addr", c.HealthAddr),
		slog.String("drain_timeout", c.DrainTimeout.String()),
		slog.String("pprof_addr", base(c.PprofAddr, "off")),
		slog.String("nats_url", base(redactURL(c.NATS.URL), "off")),
		slog.String("nats_auth", c.NATS.Auth.Method()),
		slog.String("nats_tls", c.NATS.Auth.TLS()),
		slog.String("nats_stream", c.NATS.JetStream.Stream),
		slog.String("nats_subject", c.NATS.JetStream.Subject),
		slog.String("nats_consumer", c.NATS.JetStream.Durable),
		slog.Int("nats_handlers", c.NATS.JetStream.Handlers),
		slog.Int("nats_starters", c.NATS.JetStream.Starters),
		slog.String("retention", c.Retention.String()),
		slog.String("quarantine_retention", c.QuarantineRetention.String()),
		slog.String("temporal_address", base(c.Temporal.Options.HostPort, "localhost:7233")),
		slog.String("temporal_namespace", base(c.Temporal.Options.Namespace, "default")),
		slog.Bool("payload_encryption", c.Temporal.Keys != nil),
		slog.Bool("payload_encryption_required", c.Temporal.RequireEncryption),
		slog.String("codec_server_addr", base(c.CodecServer.Addr, "off")),
		slog.String("webhook_addr", base(c.WebhookAddr, "off")),
		slog.Int("stripe_webhook_secrets", len(c.Webhooks.StripeSecrets)),
		slog.String("sendgrid_webhook_public_key", set(c.Webhooks.SendGridPublicKey)),
		slog.String("email_resend_grace", c.EmailResendGrace.String()),
		slog.Bool("allow_public_listeners", c.AllowPublicListeners),
		slog.Bool("allow_insecure_provider_urls", c.AllowInsecureProviderURLs),
	)
}
