// Package config is the one place the worker and the starter read the
// environment: it applies defaults in one place and validates, naming the
// variable at fault. The Temporal connection is read here too, through
// Temporal's own envconfig, and the payload keyring is loaded here once and
// shared by the Temporal client and the codec server. Every variable read
// here is listed in docs/configuration.md (a test compares the two).
// Secrets (API keys, tokens, keys) are read here and never logged: the
// LogValue method redacts them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/effectively/effectively/internal/codec"
	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/message"
	"github.com/effectively/effectively/internal/outbox"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/pruning"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/temporalclient"
	"github.com/effectively/effectively/internal/webhook"
	"github.com/effectively/effectively/workflows"
)

// Lookup reads one environment variable; os.LookupEnv in production.
type Lookup func(name string) (string, bool)

// EnvKeyNamespace names the key namespace's variable (Config.KeyNamespace).
const EnvKeyNamespace = "EFFECTIVELY_KEY_NAMESPACE"

// Env is an environment Load reads: LookupEnv reads one variable, Environ
// lists them all (Temporal's envconfig scans it for TEMPORAL_GRPC_META_*).
type Env interface {
	LookupEnv(name string) (string, bool)
	Environ() []string
}

// Config is everything the worker and the starter read from the
// environment.
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL). Default
	// store.DefaultURL.
	DatabaseURL string
	// DatabaseMaxConns bounds the worker's Postgres pool
	// (DATABASE_MAX_CONNS). Default 32: room for the JetStream handlers'
	// inbox transactions (two at once, whatever NATS_HANDLERS is), the
	// fast-path starters, the dispatcher, the outbox relay and the
	// activities.
	DatabaseMaxConns int
	// TaskQueue is the Temporal task queue (EFFECTIVELY_TASK_QUEUE).
	// Default workflows.DefaultTaskQueue.
	TaskQueue string
	// KeyNamespace scopes the keys and tags the objects effectively gives
	// Stripe and SendGrid (EFFECTIVELY_KEY_NAMESPACE; default empty: none,
	// keys stay "payment:evt_…"): 1 to 64 characters of A-Z a-z 0-9 _ - .
	// LoadEnv copies it into Stripe, Email and Webhooks. Required, and
	// different per deployment, when deployments share a Stripe or SendGrid
	// account and a message-ID space; see docs/configuration.md before
	// changing it on a running deployment.
	KeyNamespace string
	// Stripe configures the Stripe client (STRIPE_API_KEY, STRIPE_BASE_URL).
	Stripe payment.Config
	// Email configures the SendGrid client (SENDGRID_API_KEY,
	// SENDGRID_BASE_URL, EMAIL_FROM default receipts@effectively.local).
	Email email.Config
	// EmailPolicy is at-least-once (default) or at-most-once (EMAIL_POLICY).
	EmailPolicy store.EmailPolicy
	// Workflows holds activity timeouts (PAYMENT_SCHEDULE_TO_CLOSE, …) and
	// the local attempt before them (LOCAL_START_TO_CLOSE).
	Workflows workflows.Config
	// HealthAddr serves GET /livez, /readyz (and /healthz, an alias of
	// /livez) and the Prometheus metrics at /metrics
	// (EFFECTIVELY_HEALTH_ADDR). Default 127.0.0.1:8081; "off" disables it.
	HealthAddr string
	// DrainTimeout bounds the graceful shutdown on SIGTERM or SIGINT: the
	// intake stops, then the effects in flight (a provider call and its
	// record) get this long to finish before the Temporal worker stops;
	// whatever outlives it goes to the retry path
	// (EFFECTIVELY_DRAIN_TIMEOUT). Default 20s: well inside the 30 s grace
	// period orchestrators usually give before SIGKILL.
	DrainTimeout time.Duration
	// PprofAddr serves Go's profiles at /debug/pprof/ (EFFECTIVELY_PPROF_ADDR,
	// e.g. 127.0.0.1:6060). Default off: profiles reveal internals, so
	// Validate refuses any address but loopback, opt-in or not.
	PprofAddr string
	// LogLevel is debug, info (default), warn or error (LOG_LEVEL).
	LogLevel slog.Level
	// NATS configures intake from JetStream and the outbox relay.
	NATS NATS
	// Retention is how long processed-message rows, dispatched inbox rows
	// and published outbox rows are kept (RETENTION, a Go duration or a
	// number of days such as 30d). Default 720h (30 days). The worker
	// refuses to start when it is shorter than the redelivery horizon.
	Retention time.Duration
	// QuarantineRetention is how long a quarantine row is kept after the
	// last copy of its message arrived (QUARANTINE_RETENTION, a Go duration
	// or a number of days). Default 720h (30 days), or Retention when that
	// is longer. The worker refuses to start when it is shorter than the
	// redelivery horizon.
	QuarantineRetention time.Duration
	// PruneEvery is the interval of the pruning schedule (PRUNE_EVERY).
	// Default 1h.
	PruneEvery time.Duration
	// WebhookAddr serves POST /webhooks/stripe and /webhooks/sendgrid
	// (EFFECTIVELY_WEBHOOK_ADDR). Default 127.0.0.1:8082; "off" disables
	// it. The listener runs only when Webhooks has a secret or a key.
	WebhookAddr string
	// Webhooks verifies the providers' events: STRIPE_WEBHOOK_SECRETS (the
	// endpoint's whsec_… signing secrets, comma separated: during a
	// rotation list the new and the old), STRIPE_WEBHOOK_TOLERANCE (largest
	// age of the signed timestamp, default 300s), SENDGRID_WEBHOOK_PUBLIC_KEY
	// (the Event Webhook's verification key, base64) and
	// SENDGRID_WEBHOOK_TOLERANCE (default 300s). See docs/webhooks.md.
	Webhooks webhook.Config
	// EmailResendGrace is how long, under at-least-once, a receipt retry
	// after a possibly successful send waits for SendGrid's event before
	// sending again (EMAIL_RESEND_GRACE; 0 disables). Default 30s when
	// SENDGRID_WEBHOOK_PUBLIC_KEY is set, else 0. Every worker waits, not
	// only the one serving the webhook: the events are read from Postgres.
	// It must be shorter than EMAIL_START_TO_CLOSE.
	EmailResendGrace time.Duration
	// Temporal is the connection to Temporal. Temporal's envconfig fills
	// its Options from TEMPORAL_ADDRESS (default localhost:7233),
	// TEMPORAL_NAMESPACE (default "default"), TEMPORAL_API_KEY,
	// TEMPORAL_TLS*, TEMPORAL_GRPC_META_*, TEMPORAL_PROFILE and the
	// temporal.toml file (TEMPORAL_CONFIG_FILE);
	// EFFECTIVELY_GRPC_COMPRESSION picks gzip (default) or none. Its Keys,
	// the payload keyring (EFFECTIVELY_CODEC_KEYS or
	// EFFECTIVELY_CODEC_KEY_FILE; default none: plaintext payloads), are
	// loaded once here and are also the codec server's; with
	// EFFECTIVELY_CODEC_REQUIRE=true (default false; it needs the keys) its
	// RequireEncryption refuses plaintext payloads, in the codec server too.
	Temporal temporalclient.Config
	// CodecServer is the worker's optional codec server for the Temporal UI
	// (EFFECTIVELY_CODEC_SERVER_ADDR, default off;
	// EFFECTIVELY_CODEC_CORS_ORIGINS; EFFECTIVELY_CODEC_TOKEN). It decrypts
	// with Temporal.Keys, which it requires.
	CodecServer codec.ServerConfig

	// PublicListenerNames are the listeners that may bind beyond loopback,
	// of health, webhook and codec (EFFECTIVELY_PUBLIC_LISTENERS,
	// comma-separated, default none). The image sets health alone.
	PublicListenerNames []string
	// AllowPublicListeners lets the health, webhook and codec listeners all
	// bind beyond loopback (EFFECTIVELY_ALLOW_PUBLIC_LISTENERS, default
	// false). PublicListeners names each one for a warning at start; pprof
	// stays on loopback regardless.
	AllowPublicListeners bool
	// AllowInsecureProviderURLs lets SENDGRID_BASE_URL use plain http to a
	// host other than loopback (EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS,
	// default false), as the compose stack does for its simulator.
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

// DefaultEmailResendGrace is EmailResendGrace's default with a SendGrid key.
const DefaultEmailResendGrace = 30 * time.Second

// NATS configures the broker side: the JetStream consumer the worker takes
// messages from, the stream it creates when missing, and where the outbox
// relay publishes events. The starter's publish command reads it too.
type NATS struct {
	// URL of the NATS server (NATS_URL). Default nats://127.0.0.1:4222;
	// "off" (stored as "") disables the consumer and the outbox relay.
	URL string
	// JetStream is the consumer: NATS_STREAM (default EFFECTIVELY),
	// NATS_SUBJECT (the filter, default effectively.messages.>),
	// NATS_CONSUMER (the durable name, default effectively-worker),
	// NATS_ACK_WAIT (default 30s), NATS_MAX_DELIVER (default 5) and
	// NATS_BACKOFF (the ack waits of the second, third, … delivery, comma
	// separated, default 1m,5m,15m; "none" to use NATS_ACK_WAIT for all) and
	// NATS_HANDLERS (deliveries settled at once, default 64, at least 1) and
	// NATS_STARTERS (workflow starts in flight after the ack, default 32,
	// at least 1).
	JetStream intake.JetStreamConfig
	// DuplicateWindow is the publish deduplication window of a stream the
	// worker creates (NATS_DUPLICATE_WINDOW). Default 2m. An existing
	// stream keeps its own; the horizon is computed from the real one.
	DuplicateWindow time.Duration
	// EventsStream is the stream outbox events are published to
	// (NATS_EVENTS_STREAM). Default EFFECTIVELY_EVENTS.
	EventsStream string
	// EventsPrefix is prepended to an event's topic to form its subject
	// (NATS_EVENTS_PREFIX). Default effectively.events, so order.paid is
	// published on effectively.events.order.paid.
	EventsPrefix string
	// Auth is the credential and the TLS files the worker and the starter
	// connect with (NATS_USER, NATS_PASSWORD, NATS_PASSWORD_FILE,
	// NATS_TOKEN, NATS_TOKEN_FILE, NATS_NKEY_SEED_FILE, NATS_CREDS_FILE,
	// NATS_TLS_CA_FILE, NATS_TLS_CERT_FILE, NATS_TLS_KEY_FILE). Connect and
	// Options apply it.
	Auth NATSAuth
}

// Enabled reports whether the broker side runs at all.
func (n NATS) Enabled() bool { return n.URL != "" }

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

// OTelLookup reads the OpenTelemetry variables (OTEL_*) from the process
// environment for internal/tracing, and nothing else: they are the
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

// LoadEnv reads the configuration from env.
func LoadEnv(env Env) (Config, error) {
	get := func(name, def string) string {
		if v, ok := env.LookupEnv(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	var errs []error
	dur := func(name string) time.Duration {
		v := get(name, "")
		if v == "" {
			return 0
		}
		d, err := parseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not a duration (use e.g. 20h, 90s): %w", name, v, err))
		}
		return d
	}
	durOr := func(name string, def time.Duration) time.Duration {
		if d := dur(name); d != 0 {
			return d
		}
		return def
	}
	backoff := func(name string) []time.Duration {
		v := get(name, "")
		switch v {
		case "":
			return intake.DefaultBackOff
		case "none":
			return []time.Duration{}
		}
		var out []time.Duration
		for _, part := range strings.Split(v, ",") {
			d, err := parseDuration(strings.TrimSpace(part))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: a comma-separated list of durations (e.g. 1m,5m,15m) or none: %w", name, v, err))
				return nil
			}
			out = append(out, d)
		}
		return out
	}
	intOr := func(name string, def int) int {
		v := get(name, "")
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not a whole number", name, v))
		}
		return n
	}
	boolean := func(name string) bool {
		v := get(name, "false")
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: use true or false", name, v))
		}
		return b
	}
	c := Config{
		DatabaseURL:      get("DATABASE_URL", store.DefaultURL),
		DatabaseMaxConns: intOr("DATABASE_MAX_CONNS", DefaultDatabaseMaxConns),
		TaskQueue:        get("EFFECTIVELY_TASK_QUEUE", workflows.DefaultTaskQueue),
		Stripe: payment.Config{
			APIKey:  get("STRIPE_API_KEY", ""),
			BaseURL: get("STRIPE_BASE_URL", ""),
		},
		Email: email.Config{
			APIKey:   get("SENDGRID_API_KEY", ""),
			BaseURL:  get("SENDGRID_BASE_URL", ""),
			From:     get("EMAIL_FROM", "receipts@effectively.local"),
			FromName: get("EMAIL_FROM_NAME", "effectively"),
			Timeout:  email.DefaultTimeout, // no variable: the worker's HTTP client takes it from here
		},
		EmailPolicy: store.EmailPolicy(get("EMAIL_POLICY", string(store.AtLeastOnce))),
		Workflows: workflows.Config{
			PaymentStartToClose:    dur("PAYMENT_START_TO_CLOSE"),
			PaymentScheduleToClose: dur("PAYMENT_SCHEDULE_TO_CLOSE"),
			EmailStartToClose:      dur("EMAIL_START_TO_CLOSE"),
			EmailScheduleToClose:   dur("EMAIL_SCHEDULE_TO_CLOSE"),
			LocalStartToClose:      dur("LOCAL_START_TO_CLOSE"),

			PaymentProcessingPoll:    dur("PAYMENT_PROCESSING_POLL"),
			PaymentProcessingMaxWait: dur("PAYMENT_PROCESSING_MAX_WAIT"),
		},
		HealthAddr:   get("EFFECTIVELY_HEALTH_ADDR", "127.0.0.1:8081"),
		DrainTimeout: durOr("EFFECTIVELY_DRAIN_TIMEOUT", DefaultDrainTimeout),
		PprofAddr:    get("EFFECTIVELY_PPROF_ADDR", ""),
		NATS: NATS{
			URL: get("NATS_URL", DefaultNATSURL),
			JetStream: intake.JetStreamConfig{
				Stream:     get("NATS_STREAM", intake.DefaultStream),
				Subject:    get("NATS_SUBJECT", intake.DefaultSubject),
				Durable:    get("NATS_CONSUMER", intake.DefaultDurable),
				AckWait:    durOr("NATS_ACK_WAIT", intake.DefaultAckWait),
				MaxDeliver: intOr("NATS_MAX_DELIVER", intake.DefaultMaxDeliver),
				BackOff:    backoff("NATS_BACKOFF"),
				Handlers:   intOr("NATS_HANDLERS", intake.DefaultHandlers),
				Starters:   intOr("NATS_STARTERS", intake.DefaultStarters),
			},
			DuplicateWindow: durOr("NATS_DUPLICATE_WINDOW", intake.DefaultDuplicateWindow),
			EventsStream:    get("NATS_EVENTS_STREAM", outbox.DefaultStream),
			EventsPrefix:    get("NATS_EVENTS_PREFIX", outbox.DefaultSubjectPrefix),
		},
		Retention:           durOr("RETENTION", DefaultRetention),
		QuarantineRetention: dur("QUARANTINE_RETENTION"),
		PruneEvery:          durOr("PRUNE_EVERY", pruning.DefaultEvery),
		WebhookAddr:         get("EFFECTIVELY_WEBHOOK_ADDR", "127.0.0.1:8082"),
		Webhooks: webhook.Config{
			StripeSecrets:     list(get("STRIPE_WEBHOOK_SECRETS", "")),
			StripeTolerance:   durOr("STRIPE_WEBHOOK_TOLERANCE", webhook.DefaultTolerance),
			SendGridPublicKey: get("SENDGRID_WEBHOOK_PUBLIC_KEY", ""),
			SendGridTolerance: durOr("SENDGRID_WEBHOOK_TOLERANCE", webhook.DefaultTolerance),
		},
		PublicListenerNames:       list(get(EnvPublicListeners, "")),
		AllowPublicListeners:      boolean(EnvAllowPublicListeners),
		AllowInsecureProviderURLs: boolean(EnvAllowInsecureProviderURLs),
	}
	c.KeyNamespace = get(EnvKeyNamespace, "")
	if err := identity.ValidateNamespace(c.KeyNamespace); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: %w", EnvKeyNamespace, c.KeyNamespace, err))
	}
	c.Stripe.Namespace, c.Email.Namespace, c.Webhooks.Namespace = c.KeyNamespace, c.KeyNamespace, c.KeyNamespace
	if c.WebhookAddr == "off" {
		c.WebhookAddr = ""
	}
	if c.QuarantineRetention == 0 {
		// Unset: never shorter than RETENTION, so that a RETENTION raised
		// past 30 days for a long horizon does not make the default refused.
		c.QuarantineRetention = max(DefaultQuarantineRetention, c.Retention)
	}
	switch {
	case get("EMAIL_RESEND_GRACE", "") != "":
		c.EmailResendGrace = dur("EMAIL_RESEND_GRACE")
	case c.Webhooks.SendGridPublicKey != "":
		c.EmailResendGrace = DefaultEmailResendGrace
	}
	if c.HealthAddr == "off" {
		c.HealthAddr = ""
	}
	if c.NATS.URL == "off" {
		c.NATS.URL = ""
	}
	var authErrs []error
	c.NATS.Auth, authErrs = loadNATSAuth(get, c.NATS.URL)
	errs = append(errs, authErrs...)
	c.logLevelSet = get("LOG_LEVEL", "") != ""
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: use debug, info, warn or error", get("LOG_LEVEL", "")))
	}
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
	if opts.ConnectionOptions.GrpcCompression, err = temporalclient.Compression(strings.TrimSpace(v)); err != nil {
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

// Validate checks what the worker needs, naming the variable at fault.
func (c Config) Validate() error {
	var errs []error
	if c.CodecServer.Enabled() && c.Temporal.Keys == nil {
		errs = append(errs, fmt.Errorf("%s needs %s or %s", codec.EnvServerAddr, codec.EnvKeys, codec.EnvKeyFile))
	}
	if c.Stripe.APIKey == "" {
		errs = append(errs, errors.New("STRIPE_API_KEY is not set (use sk_test_… with STRIPE_BASE_URL pointing at the simulator for local runs)"))
	}
	if c.Email.APIKey == "" {
		errs = append(errs, errors.New("SENDGRID_API_KEY is not set"))
	}
	switch c.EmailPolicy {
	case store.AtLeastOnce, store.AtMostOnce:
	default:
		errs = append(errs, fmt.Errorf("EMAIL_POLICY=%q: use %s or %s", c.EmailPolicy, store.AtLeastOnce, store.AtMostOnce))
	}
	if c.DatabaseMaxConns < 4 || c.DatabaseMaxConns > 1000 {
		errs = append(errs, fmt.Errorf("DATABASE_MAX_CONNS=%d: must be between 4 and 1000", c.DatabaseMaxConns))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("EFFECTIVELY_DRAIN_TIMEOUT=%s: must be positive", c.DrainTimeout))
	}
	errs = append(errs, c.validateBroker()...)
	errs = append(errs, c.validateWebhooks()...)
	errs = append(errs, c.validateListeners()...)
	errs = append(errs, c.validateProviderURLs()...)
	if err := c.Workflows.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("activity timeouts (PAYMENT_*/EMAIL_* variables): %w", err))
	}
	return errors.Join(errs...)
}

// validateBroker checks the NATS and retention settings. The retention's
// check against the redelivery horizon needs the broker and Temporal, so the
// worker makes it at start.
func (c Config) validateBroker() []error {
	var errs []error
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("RETENTION=%s: must be positive", c.Retention))
	}
	if c.QuarantineRetention <= 0 {
		errs = append(errs, fmt.Errorf("QUARANTINE_RETENTION=%s: must be positive", c.QuarantineRetention))
	}
	if c.PruneEvery <= 0 {
		errs = append(errs, fmt.Errorf("PRUNE_EVERY=%s: must be positive", c.PruneEvery))
	}
	if !c.NATS.Enabled() {
		return errs
	}
	n, js := c.NATS, c.NATS.JetStream
	// Each URL of a comma-separated list on its own: parsed whole, a list
	// passes whatever follows its first URL. The value is not quoted: it may
	// hold credentials.
	urls := strings.Split(n.URL, ",")
	for i, one := range urls {
		if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" {
			which := "NATS_URL"
			if len(urls) > 1 {
				which = fmt.Sprintf("NATS_URL (URL %d of %d)", i+1, len(urls))
			}
			errs = append(errs, fmt.Errorf("%s: not a URL such as nats://127.0.0.1:4222 (or off)", which))
		}
	}
	names := map[string]string{"NATS_STREAM": js.Stream, "NATS_CONSUMER": js.Durable, "NATS_EVENTS_STREAM": n.EventsStream}
	for _, name := range []string{"NATS_STREAM", "NATS_CONSUMER", "NATS_EVENTS_STREAM"} {
		if v := names[name]; v == "" || strings.ContainsAny(v, ". *>\t") {
			errs = append(errs, fmt.Errorf("%s=%q: must be non-empty, without '.', '*', '>' or spaces", name, v))
		}
	}
	if _, err := intake.PublishSubject(js.Subject, message.TypeOrderPlaced); err != nil {
		errs = append(errs, fmt.Errorf("NATS_SUBJECT=%q: %w", js.Subject, err))
	}
	if _, err := intake.PublishSubject(n.EventsPrefix+".>", "order.paid"); err != nil {
		errs = append(errs, fmt.Errorf("NATS_EVENTS_PREFIX=%q: %w", n.EventsPrefix, err))
	}
	if js.AckWait <= 0 {
		errs = append(errs, fmt.Errorf("NATS_ACK_WAIT=%s: must be positive", js.AckWait))
	}
	for _, b := range js.BackOff {
		if b <= 0 {
			errs = append(errs, fmt.Errorf("NATS_BACKOFF: every entry must be positive, got %s", b))
		}
	}
	switch {
	case js.MaxDeliver < 1:
		errs = append(errs, fmt.Errorf("NATS_MAX_DELIVER=%d: must be at least 1; unlimited redelivery has no horizon, so no retention would be safe", js.MaxDeliver))
	case len(js.BackOff) > 0 && js.MaxDeliver <= len(js.BackOff)+1:
		errs = append(errs, fmt.Errorf("NATS_MAX_DELIVER=%d: must exceed the %d ack waits given by NATS_ACK_WAIT and NATS_BACKOFF (JetStream refuses otherwise)", js.MaxDeliver, len(js.BackOff)+1))
	}
	if js.Handlers < 1 {
		errs = append(errs, fmt.Errorf("NATS_HANDLERS=%d: must be at least 1", js.Handlers))
	}
	if js.Starters < 1 {
		errs = append(errs, fmt.Errorf("NATS_STARTERS=%d: must be at least 1", js.Starters))
	}
	if n.DuplicateWindow <= 0 {
		errs = append(errs, fmt.Errorf("NATS_DUPLICATE_WINDOW=%s: must be positive", n.DuplicateWindow))
	}
	return errs
}

// validateWebhooks checks the webhook listener and the resend grace.
func (c Config) validateWebhooks() []error {
	var errs []error
	if err := c.Webhooks.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Webhooks.Enabled() && c.WebhookAddr == "" {
		errs = append(errs, errors.New("EFFECTIVELY_WEBHOOK_ADDR is off but a webhook secret or key is set: unset STRIPE_WEBHOOK_SECRETS/SENDGRID_WEBHOOK_PUBLIC_KEY or give an address"))
	}
	emailStart := c.Workflows.EmailStartToClose
	if emailStart == 0 {
		emailStart = workflows.DefaultConfig().EmailStartToClose
	}
	switch {
	case c.EmailResendGrace < 0:
		errs = append(errs, fmt.Errorf("EMAIL_RESEND_GRACE=%s: must not be negative", c.EmailResendGrace))
	case c.EmailResendGrace > 0 && c.EmailResendGrace >= emailStart:
		errs = append(errs, fmt.Errorf("EMAIL_RESEND_GRACE=%s: must be shorter than EMAIL_START_TO_CLOSE (%s), which bounds the attempt that waits", c.EmailResendGrace, emailStart))
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
