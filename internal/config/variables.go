package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/auditschedule"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// variable is one row of the table of variables: its name, its default,
// how it is loaded and checked, and its line in docs/configuration.md.
type variable struct {
	name string
	// def is the default as the variable would be written ("" for none);
	// an unset or blank variable loads it.
	def string
	// field is the Go path of the field it fills (Workflows.EmailStartToClose),
	// for errors that a package's own Validate reports by field.
	field string
	// load parses v, the variable's value or def, into c; given reports
	// whether the variable was set. Nil: read by another loader (Temporal's
	// envconfig, the keyring, NATS authentication), listed for Names and the
	// documentation.
	load func(c *Config, v string, given bool) error
	// check is Validate's test of the loaded value; its error starts with
	// the value and is prefixed with "NAME=".
	check func(c Config) error
	// doc is the meaning column of its row in docs/configuration.md; ""
	// puts the variable in the previous variable's row.
	doc string
	// docDefault, when set, is the row's default column instead of def.
	docDefault string
}

// variables is the table: LoadEnv loads in its order (a default that
// depends on another variable comes after it), Validate runs its checks,
// Names lists it and docs/configuration.md's table is generated from it.
var variables = []variable{
	str("DATABASE_URL", store.DefaultURL, "DatabaseURL", "Postgres, for the worker and the starter", func(c *Config) *string { return &c.DatabaseURL }),
	num("DATABASE_MAX_CONNS", DefaultDatabaseMaxConns, "DatabaseMaxConns", "the worker's pool (4–1000): JetStream handlers, starters, dispatcher, relay and activities share it; a quarter of it is opened before /readyz",
		func(c *Config) *int { return &c.DatabaseMaxConns }).
		checked(func(c Config) error { return within(c.DatabaseMaxConns, 4, 1000) }),
	str("EFFECTIVELY_TASK_QUEUE", workflows.DefaultTaskQueue, "TaskQueue", "task queue of the worker and the starter", func(c *Config) *string { return &c.TaskQueue }),
	{name: "EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE", def: "false", field: "Workflows.RouteQueues",
		load: func(c *Config, v string, _ bool) error {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%q: use true or false", v)
			}
			c.Workflows.RouteQueues = ""
			if on {
				c.Workflows.RouteQueues = c.TaskQueue
			}
			return nil
		},
		doc: "run each route's effects (charges, refunds, receipts, settles) on a task queue of its own, `EFFECTIVELY_TASK_QUEUE-effects-<consumer>`, so that a route's backlog waiting at a provider's rate limit holds none of the activity slots another route needs (docs/operations.md). Every worker polls these queues whatever the setting, so workers of both settings may run side by side; roll back only to a version that polls them"},
	{name: "EFFECTIVELY_START_RATE", def: "auto", field: "StartRate",
		load: func(c *Config, v string, _ bool) error {
			if v == "auto" {
				c.StartRate = -1
				return nil
			}
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r < 0 || r > 1e6 {
				return fmt.Errorf("%q: want auto, or workflow starts per second (0 to 1000000)", v)
			}
			c.StartRate = r
			return nil
		},
		doc: "workflow starts per second of each route, shared by every worker process (a bucket in Postgres, reserved a tenth of a second's worth at a time); a message past it stays pending in the inbox (recorded and acknowledged) and is started when the route has room, so that a backlog after an outage waits in Postgres instead of flooding Temporal (docs/operations.md). `auto`: 1.25 times the paid messages per second the provider limits allow, `min(STRIPE_ENDPOINT_RATE_LIMIT, STRIPE_RATE_LIMIT/2, SENDGRID_RATE_LIMIT)` of those set, none when none is; `0`: none. A worker that cannot reach Postgres paces itself alone at this rate"},
	{name: "EFFECTIVELY_START_AHEAD", def: short(DefaultStartAhead), field: "StartAhead",
		load: func(c *Config, v string, _ bool) error {
			d, err := parseDuration(v)
			if err != nil || d < 0 || d > time.Hour {
				return fmt.Errorf("%q: want a duration from 0 (no hold) to 1h", v)
			}
			c.StartAhead = d
			return nil
		},
		doc: "how far ahead a route's requests may be reserved at the providers' shared rate limits before its new workflow starts hold: its messages stay pending in the inbox (recorded and acknowledged) until the line is shorter, so that a backlog drains at the limit from Postgres instead of flooding Temporal, whatever the number of workers (docs/operations.md). `0`: no hold. Only routes whose requests wait at a limit are held"},
	num("EFFECTIVELY_ROUTE_EFFECT_SLOTS", DefaultRouteEffectSlots, "RouteEffectSlots",
		"effect activities each worker process runs at once for one route's queue (`EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE`), 1–10000; the rest wait in Temporal's task queue, holding nothing. Keep slots × workers under what the route's provider limit sends in 20 s (the limiter's longest wait), or the extra ones are sent back and retried (docs/operations.md)",
		func(c *Config) *int { return &c.RouteEffectSlots }).
		checked(func(c Config) error { return within(c.RouteEffectSlots, 1, 10000) }),
	{name: EnvKeyNamespace, field: "KeyNamespace", docDefault: "empty (none: keys stay `payment:evt_…`)",
		load: func(c *Config, v string, _ bool) error {
			c.KeyNamespace = v
			c.Stripe.Namespace, c.Email.Namespace, c.Webhooks.Namespace = v, v, v
			if err := identity.ValidateNamespace(v); err != nil {
				return fmt.Errorf("%q: %w", v, err)
			}
			return nil
		},
		doc: "1–64 characters of `A-Z a-z 0-9 _ - .`; scopes the Stripe idempotency keys (`eu/payment:evt_…`) and tags PaymentIntents, Refunds and mails, so that deployments sharing a Stripe or SendGrid account never replay, adopt or settle each other's payments. **Required**, one per deployment, when several share an account and a message-ID space; the worker records it in Postgres and refuses to start (exit 2) with another value while payments, refunds or receipts of the recorded one are open (see [below](#key-namespace))"},
	str("STRIPE_API_KEY", "", "Stripe.APIKey", "secret; never logged", func(c *Config) *string { return &c.Stripe.APIKey }).
		shown("required (worker)"),
	str("STRIPE_BASE_URL", "", "Stripe.BaseURL", "e.g. `http://127.0.0.1:12111` for the simulator; https, or http to loopback, or http anywhere with a test key; a live key goes only to `https://api.stripe.com` (see [below](#listeners-and-provider-urls))",
		func(c *Config) *string { return &c.Stripe.BaseURL }).shown("real Stripe"),
	str("SENDGRID_API_KEY", "", "Email.APIKey", "secret; never logged", func(c *Config) *string { return &c.Email.APIKey }).
		shown("required (worker)"),
	str("SENDGRID_BASE_URL", "", "Email.BaseURL", "e.g. `http://127.0.0.1:12112`; https, or http to loopback, or http anywhere with `EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS`",
		func(c *Config) *string { return &c.Email.BaseURL }).shown("real SendGrid"),
	flag(EnvAllowInsecureProviderURLs, "AllowInsecureProviderURLs", "`true` lets `SENDGRID_BASE_URL` use plain http to a host other than loopback (the compose stack's simulator)",
		func(c *Config) *bool { return &c.AllowInsecureProviderURLs }),
	rate("STRIPE_RATE_LIMIT", "80", "RateLimits.Stripe",
		"Stripe requests per second of all workers together, `RATE` or `RATE,BURST` (burst defaults to the rate); `0` is none. Stripe allows 100/s live, 25/s in a sandbox: leave headroom (see [operations](operations.md#provider-rate-limits))",
		func(c *Config) *ratelimit.Rate { return &c.RateLimits.Stripe }),
	rate("STRIPE_ENDPOINT_RATE_LIMIT", "20", "RateLimits.StripeEndpoint",
		"the same for each Stripe endpoint (create and confirm are two); Stripe allows 25/s each",
		func(c *Config) *ratelimit.Rate { return &c.RateLimits.StripeEndpoint }),
	rate("SENDGRID_RATE_LIMIT", "0", "RateLimits.SendGrid",
		"Mail Send requests per second of all workers together; set it to the API key's limit",
		func(c *Config) *ratelimit.Rate { return &c.RateLimits.SendGrid }),
	str("EMAIL_FROM", "receipts@effectively.local", "Email.From", "receipt sender", func(c *Config) *string { return &c.Email.From }),
	str("EMAIL_FROM_NAME", "effectively", "Email.FromName", "", func(c *Config) *string { return &c.Email.FromName }),
	{name: "EMAIL_POLICY", def: string(store.AtLeastOnce), field: "EmailPolicy",
		load: func(c *Config, v string, _ bool) error { c.EmailPolicy = store.EmailPolicy(v); return nil },
		check: func(c Config) error {
			switch c.EmailPolicy {
			case store.AtLeastOnce, store.AtMostOnce:
				return nil
			}
			return fmt.Errorf("%q: use %s or %s", c.EmailPolicy, store.AtLeastOnce, store.AtMostOnce)
		},
		doc: "or `at-most-once`: which way the receipt window may fail (see [guarantees](guarantees.md))"},
	dur("PAYMENT_START_TO_CLOSE", workflows.DefaultConfig().PaymentStartToClose, "Workflows.PaymentStartToClose",
		"payment activity timeouts; with the local attempt they must stay below 23 h (Stripe keeps keys 24 h); every start-to-close is at least `4s`, no request being sent in its last 2 s", func(c *Config) *time.Duration { return &c.Workflows.PaymentStartToClose }),
	dur("PAYMENT_SCHEDULE_TO_CLOSE", workflows.DefaultConfig().PaymentScheduleToClose, "Workflows.PaymentScheduleToClose", "", func(c *Config) *time.Duration { return &c.Workflows.PaymentScheduleToClose }),
	dur("EMAIL_START_TO_CLOSE", workflows.DefaultConfig().EmailStartToClose, "Workflows.EmailStartToClose", "receipt activity timeouts", func(c *Config) *time.Duration { return &c.Workflows.EmailStartToClose }),
	dur("EMAIL_SCHEDULE_TO_CLOSE", workflows.DefaultConfig().EmailScheduleToClose, "Workflows.EmailScheduleToClose", "", func(c *Config) *time.Duration { return &c.Workflows.EmailScheduleToClose }),
	dur("LOCAL_START_TO_CLOSE", workflows.DefaultConfig().LocalStartToClose, "Workflows.LocalStartToClose",
		"the local attempt each effect gets before the regular activity (the charge's twice: its receipt gets as long again; counts against the key window)", func(c *Config) *time.Duration { return &c.Workflows.LocalStartToClose }),
	dur("PAYMENT_PROCESSING_POLL", workflows.DefaultConfig().PaymentProcessingPoll, "Workflows.PaymentProcessingPoll",
		"how long a workflow whose payment is `processing` waits for Stripe's webhook before it retrieves the PaymentIntent again (a durable timer)",
		func(c *Config) *time.Duration { return &c.Workflows.PaymentProcessingPoll }),
	dur("PAYMENT_PROCESSING_MAX_WAIT", workflows.DefaultConfig().PaymentProcessingMaxWait, "Workflows.PaymentProcessingMaxWait",
		"how long a `processing` payment is waited for in all; past it the workflow fails as `payment_processing_timeout` and the payment stays open for an operator (docs/runbook.md); a refund of the order waits for the payment as long, plus the payment activity's 20 h (docs/refunds.md)",
		func(c *Config) *time.Duration { return &c.Workflows.PaymentProcessingMaxWait }),
	{name: "REFUND_AWAIT_PAYMENT", field: "Workflows.RefundAwaitPayment",
		docDefault: "`PAYMENT_SCHEDULE_TO_CLOSE` + `PAYMENT_PROCESSING_MAX_WAIT` + 5m",
		load:       func(c *Config, v string, _ bool) error { return parseInto(&c.Workflows.RefundAwaitPayment, v, 0) },
		doc:        "how long a refund that arrived before its order's payment waits for it; past it, `order_not_paid`"},
	dur("REFUND_PENDING_MAX_WAIT", workflows.DefaultConfig().RefundPendingMaxWait, "Workflows.RefundPendingMaxWait",
		"how long a refund Stripe answered `pending` is waited for; past it the workflow fails as `refund_pending_timeout`, its receipt unsent, and `charge.refund.updated` still settles the ledger (docs/refunds.md)",
		func(c *Config) *time.Duration { return &c.Workflows.RefundPendingMaxWait }),
	addr("EFFECTIVELY_HEALTH_ADDR", "127.0.0.1:8081", "HealthAddr",
		"the worker's `/livez`, `/readyz` and `/metrics` (Prometheus) listener, see docs/operations.md; `off` disables it", func(c *Config) *string { return &c.HealthAddr }),
	dur("EFFECTIVELY_DRAIN_TIMEOUT", DefaultDrainTimeout, "DrainTimeout",
		"the whole shutdown, from SIGTERM (or a part's failure): the intake settles what it fetched and the effects in flight finish their provider call and record until the last quarter, in which the Temporal workers stop, all at once; at its end the worker exits whatever is still stopping. Keep it under the orchestrator's grace period",
		func(c *Config) *time.Duration { return &c.DrainTimeout }).checked(func(c Config) error { return positive(c.DrainTimeout) }),
	addr("EFFECTIVELY_WEBHOOK_ADDR", "127.0.0.1:8082", "WebhookAddr",
		"where the routes are served; `off` disables. The listener runs only when a Stripe secret or a SendGrid key is set.", func(c *Config) *string { return &c.WebhookAddr }),
	{name: "STRIPE_WEBHOOK_SECRETS", field: "Webhooks.StripeSecrets", docDefault: "unset",
		load: func(c *Config, v string, _ bool) error { c.Webhooks.StripeSecrets = list(v); return nil },
		doc:  "the endpoint's signing secrets (`whsec_…`), comma separated. Unset: `/webhooks/stripe` answers 404 (docs/webhooks.md)."},
	dur("STRIPE_WEBHOOK_TOLERANCE", webhook.DefaultTolerance, "Webhooks.StripeTolerance",
		"largest age of the timestamp in `Stripe-Signature` (Stripe's own default).", func(c *Config) *time.Duration { return &c.Webhooks.StripeTolerance }),
	str("SENDGRID_WEBHOOK_PUBLIC_KEY", "", "Webhooks.SendGridPublicKey",
		"the Event Webhook's verification key, as SendGrid's settings page shows it (base64). Unset: `/webhooks/sendgrid` answers 404.",
		func(c *Config) *string { return &c.Webhooks.SendGridPublicKey }).shown("unset"),
	dur("SENDGRID_WEBHOOK_TOLERANCE", webhook.DefaultTolerance, "Webhooks.SendGridTolerance",
		"largest difference between the signed timestamp and now (the helper does not check it; the worker does).", func(c *Config) *time.Duration { return &c.Webhooks.SendGridTolerance }),
	addr("EFFECTIVELY_API_ADDR", "", "API.Addr",
		"the HTTP intake (`POST /v1/messages`, `GET /v1/messages/{consumer}/{id}`, docs/intake.md#http); off unless set; needs `EFFECTIVELY_API_TOKENS_FILE`",
		func(c *Config) *string { return &c.API.Addr }).shown("off"),
	str("EFFECTIVELY_API_TOKENS_FILE", "", "API.TokensFile",
		"the API's bearer tokens, one `NAME sha256:HEX TYPE[,TYPE…]` a line (the SHA-256 of each token, never the token; each bound to the message types it may submit); read again when it changes",
		func(c *Config) *string { return &c.API.TokensFile }).shown("unset"),
	str("EFFECTIVELY_API_TLS_CERT_FILE", "", "API.TLSCertFile", "PEM certificate and key: the API serves HTTPS",
		func(c *Config) *string { return &c.API.TLSCertFile }).shown("unset (plain HTTP)"),
	str("EFFECTIVELY_API_TLS_KEY_FILE", "", "API.TLSKeyFile", "", func(c *Config) *string { return &c.API.TLSKeyFile }),
	str("EFFECTIVELY_API_CLIENT_CA_FILE", "", "API.ClientCAFile", "PEM CA: the API requires a client certificate it signed (mTLS), on top of the token",
		func(c *Config) *string { return &c.API.ClientCAFile }).shown("unset"),
	{name: "EFFECTIVELY_API_TOKEN_RATE", def: strconv.Itoa(httpapi.DefaultTokenRate), field: "API.TokenRate",
		load: func(c *Config, v string, _ bool) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100000 {
				return fmt.Errorf("%q: a whole number of requests per second, 1 to 100000", v)
			}
			c.API.TokenRate = float64(n)
			return nil
		},
		doc: "requests per second per token, bursts of twice as many; beyond it `429` with `Retry-After`"},
	dur("EFFECTIVELY_API_MAX_WAIT", httpapi.DefaultMaxWait, "API.MaxWait", "the cap on `Prefer: wait=N` (at most `5m`)",
		func(c *Config) *time.Duration { return &c.API.MaxWait }),
	{name: "EMAIL_RESEND_GRACE", field: "EmailResendGrace", docDefault: "`" + short(DefaultEmailResendGrace) + "` with a SendGrid key, else `0`",
		load: func(c *Config, v string, given bool) error {
			if !given && c.Webhooks.SendGridPublicKey != "" { // after SENDGRID_WEBHOOK_PUBLIC_KEY in the table
				v = short(DefaultEmailResendGrace)
			}
			return parseInto(&c.EmailResendGrace, v, 0)
		},
		check: func(c Config) error {
			switch g, start := c.EmailResendGrace, c.Workflows.EmailStartToClose; {
			case g < 0:
				return fmt.Errorf("%s: must not be negative", g)
			case g > 0 && g > start-2*deadline.DefaultMargin:
				return fmt.Errorf("%s: must leave EMAIL_START_TO_CLOSE (%s), which bounds the attempt that waits, at least %s after it: no mail is sent within %s of its attempt's deadline",
					g, start, 2*deadline.DefaultMargin, deadline.DefaultMargin)
			}
			return nil
		},
		doc: "under at-least-once, how long a receipt retry that follows a possibly successful send waits for SendGrid's event before sending again; `0` disables. At most `EMAIL_START_TO_CLOSE` less `4s`: the attempt that waits must still send."},
	str("EFFECTIVELY_PPROF_ADDR", "", "PprofAddr", "Go's profiles at `/debug/pprof/`, on loopback only (refused elsewhere); `make bench` uses it",
		func(c *Config) *string { return &c.PprofAddr }).shown("off"),
	{name: EnvPublicListeners, field: "PublicListenerNames", docDefault: "empty",
		load: func(c *Config, v string, _ bool) error { c.PublicListenerNames = list(v); return nil },
		doc:  "comma-separated listeners that may bind beyond loopback, of `health`, `webhook`, `codec`, `api` (pprof never); the worker image sets `health`"},
	flag(EnvAllowPublicListeners, "AllowPublicListeners",
		"`true` lets the health, webhook, codec and API listeners bind beyond loopback (`:8081`, `0.0.0.0`, another IP, a hostname); the worker logs a warning naming each",
		func(c *Config) *bool { return &c.AllowPublicListeners }),
	{name: "LOG_LEVEL", def: "info", field: "LogLevel", docDefault: "`info` (worker), `warn` (starter)",
		load: func(c *Config, v string, given bool) error {
			c.logLevelSet = given
			if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
				return fmt.Errorf("%q: use debug, info, warn or error", v)
			}
			return nil
		},
		doc: "`debug`, `info`, `warn`, `error`; the worker logs JSON on stderr, the starter text"},
	addr("NATS_URL", DefaultNATSURL, "NATS.URL",
		"the broker; `off` disables the consumer and the relay (the dispatcher and the pruning schedule still run; `starter publish` refuses)", func(c *Config) *string { return &c.NATS.URL }),
	{name: EnvSources, def: SourceJetStream, field: "Sources", docDefault: "`jetstream` (none with `NATS_URL=off`)",
		load: func(c *Config, v string, given bool) error {
			c.Sources = list(v)
			if !given && !c.NATS.Enabled() {
				c.Sources = nil // NATS_URL=off alone keeps meaning: no broker
			}
			return nil
		},
		check: checkSources,
		doc:   "comma-separated kinds of source the worker runs, each once, each with its own variables, readiness check `source.<kind>` and metrics label: `jetstream` (the `NATS_*` consumer), `kafka`, `rabbitmq` (docs/sources.md)"},
	str("NATS_STREAM", jetstream.DefaultStream, "NATS.JetStream.Stream",
		"stream to consume; created (file storage, `MaxAge = RETENTION`, `MaxMsgSize` = 64 KiB message limit + 4 KiB for headers, so the broker refuses a larger publish) when missing; an existing stream is left as it is, with a warning when it keeps messages longer than `RETENTION` or larger than that size",
		func(c *Config) *string { return &c.NATS.JetStream.Stream }),
	str("NATS_SUBJECT", jetstream.DefaultSubject, "NATS.JetStream.Subject",
		"consumer filter; `starter publish` sends a message of type T to `effectively.messages.T`", func(c *Config) *string { return &c.NATS.JetStream.Subject }),
	str("NATS_CONSUMER", jetstream.DefaultDurable, "NATS.JetStream.Durable", "durable consumer name, shared by all worker processes",
		func(c *Config) *string { return &c.NATS.JetStream.Durable }),
	{name: "NATS_CONSUMER_PER_ROUTE", def: "false", field: "NATS.PerRoute", docDefault: "`true` when `NATS_SUBJECT` ends in `.>`",
		load: func(c *Config, v string, given bool) error {
			if !given { // after NATS_SUBJECT in the table
				c.NATS.PerRoute = strings.HasSuffix(cmp.Or(c.NATS.JetStream.Subject, jetstream.DefaultSubject), ".>")
				return nil
			}
			return parseFlag(&c.NATS.PerRoute, v)
		},
		doc: "also run a durable consumer per route (`NATS_CONSUMER-<consumer>`, filtering the route's subject, starting after `NATS_CONSUMER`'s ack floor when created), source `jetstream-<consumer>`; `NATS_CONSUMER` then acks the routes' subjects without recording them and takes the rest (unknown types). A route's messages no longer wait behind another route's backlog (docs/operations.md); needs a `NATS_SUBJECT` ending in `.>`. Turned off, the workers record what each route's consumer still holds and delete it once no worker with the setting on pulls from it (docs/operations.md). On by default since 2026-12-05: with one shared consumer, the refunds published after an outage waited up to 2.9 s behind 5,000 orders before their inbox row, and longer behind more (docs/operations.md)"},
	{name: "NATS_ROUTE_BACKLOG_WAITS", def: "false", field: "NATS.RouteWait", docDefault: "`NATS_CONSUMER_PER_ROUTE`'s value",
		load: func(c *Config, v string, given bool) error {
			if !given { // after NATS_CONSUMER_PER_ROUTE in the table
				c.NATS.RouteWait = c.NATS.PerRoute
				return nil
			}
			return parseFlag(&c.NATS.RouteWait, v)
		},
		doc: "with `NATS_CONSUMER_PER_ROUTE`: a route's delivery waits before its inbox insert, kept in progress, for at most half its ack wait, while its route has 2 × the starters it may use recorded and not started; a backlog that comes at once then enters Postgres about as fast as its route starts, and the other routes' messages do not wait for the machine meanwhile. Measured on 2 cores at Stripe's limits (20/s), the refunds' p99 beside 1,000 orders at once: 1.1–1.9× of idle with it in 8 runs; on a busier machine 1.6–2.8× with it, 10–13× without (docs/operations.md). `false` turns it off; turning it on or off needs nothing else"},
	dur("NATS_ACK_WAIT", jetstream.DefaultAckWait, "NATS.JetStream.AckWait", "ack wait of the first delivery", func(c *Config) *time.Duration { return &c.NATS.JetStream.AckWait }),
	{name: "NATS_BACKOFF", def: shortList(jetstream.DefaultBackOff), field: "NATS.JetStream.BackOff",
		load: func(c *Config, v string, _ bool) error {
			c.NATS.JetStream.BackOff = []time.Duration{}
			if v == "none" {
				return nil
			}
			for _, part := range strings.Split(v, ",") {
				d, err := parseDuration(strings.TrimSpace(part))
				if err != nil {
					c.NATS.JetStream.BackOff = nil
					return fmt.Errorf("%q: a comma-separated list of durations (e.g. 1m,5m,15m) or none: %w", v, err)
				}
				c.NATS.JetStream.BackOff = append(c.NATS.JetStream.BackOff, d)
			}
			return nil
		},
		doc: "ack waits of the 2nd, 3rd, … delivery (the last repeats); `none` uses `NATS_ACK_WAIT` throughout"},
	{name: "NATS_DEAD_LETTER_STREAM", field: "NATS.JetStream.DeadLetters", docDefault: "`NATS_STREAM` + `_MAX_DELIVERIES`",
		load: func(c *Config, v string, _ bool) error {
			if strings.ContainsAny(v, ". *>\t") {
				return fmt.Errorf("%q: a stream name has no '.', '*', '>' or spaces", v)
			}
			c.NATS.JetStream.DeadLetters = v // "" takes NATS_STREAM's default name
			return nil
		},
		doc: "stream that captures the consumers' max-delivery advisories (`$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<NATS_STREAM>.*`), created when missing (7 days `MaxAge`); each consumer reads its own from a durable `<consumer>-dead-letters` and records the message (else quarantines it, `max_deliver`) when JetStream delivered it its last time and no worker settled it: a worker killed holding it, a pull lost with it. An advisory read more than 30 min after it was captured only quarantines. Name an existing stream that already captures those subjects, or `off` (then such a message stays in the stream unrecorded)"},
	num("NATS_MAX_DELIVER", jetstream.DefaultMaxDeliver, "NATS.JetStream.MaxDeliver",
		"deliveries before a message that cannot be recorded is quarantined as `max_deliver`; at least 1 (unlimited redelivery has no horizon) and more than the number of ack waits",
		func(c *Config) *int { return &c.NATS.JetStream.MaxDeliver }).checked(ifNATS(func(c Config) error {
		if err := atLeast(c.NATS.JetStream.MaxDeliver, 1); err != nil {
			return fmt.Errorf("%w; unlimited redelivery has no horizon, so no retention would be safe", err)
		}
		return nil
	})),
	num("NATS_HANDLERS", jetstream.DefaultHandlers, "NATS.JetStream.Handlers",
		"deliveries the consumer settles at once (record, then ack); ≥ 1; their inbox inserts share transactions, two at a time, so they need no Postgres connection each",
		func(c *Config) *int { return &c.NATS.JetStream.Handlers }).checked(ifNATS(func(c Config) error { return atLeast(c.NATS.JetStream.Handlers, 1) })),
	num("NATS_STARTERS", intake.DefaultStarters, "NATS.JetStream.Starters",
		"workflow starts in flight on the fast path after the ack; ≥ 1; a start holds no Postgres connection, only the mark after it does",
		func(c *Config) *int { return &c.NATS.JetStream.Starters }).checked(ifNATS(func(c Config) error { return atLeast(c.NATS.JetStream.Starters, 1) })),
	dur("NATS_DUPLICATE_WINDOW", jetstream.DefaultDuplicateWindow, "NATS.DuplicateWindow",
		"duplicate window of streams the worker creates (an existing stream keeps its own)", func(c *Config) *time.Duration { return &c.NATS.DuplicateWindow }).
		checked(ifNATS(func(c Config) error { return positive(c.NATS.DuplicateWindow) })),
	str("NATS_EVENTS_STREAM", outbox.DefaultStream, "NATS.EventsStream",
		"stream for outbox events (created when missing, with the same `MaxAge` and `MaxMsgSize` as `NATS_STREAM`)", func(c *Config) *string { return &c.NATS.EventsStream }).
		checked(ifNATS(func(c Config) error { return streamName(c.NATS.EventsStream) })),
	str("NATS_EVENTS_PREFIX", outbox.DefaultSubjectPrefix, "NATS.EventsPrefix",
		"events are published on `<prefix>.<topic>`, e.g. `effectively.events.order.paid`", func(c *Config) *string { return &c.NATS.EventsPrefix }).
		checked(ifNATS(func(c Config) error {
			if _, err := jetstream.PublishSubject(c.NATS.EventsPrefix+".>", "order.paid"); err != nil {
				return fmt.Errorf("%q: %w", c.NATS.EventsPrefix, err)
			}
			return nil
		})),
	external(EnvNATSUser, "unset", "user and password for NATS (the password inline or in a file, not both); see [NATS authentication](#nats-authentication)"),
	external(EnvNATSPassword, "", ""),
	external(EnvNATSPasswordFile, "", ""),
	external(EnvNATSToken, "unset", "an authorization token for NATS, inline or in a file (not both)"),
	external(EnvNATSTokenFile, "", ""),
	external(EnvNATSNkeySeedFile, "unset", "a file holding a user nkey seed (`SU…`); the client signs the server's challenge with it, the seed never crosses the wire"),
	external(EnvNATSCredsFile, "unset", "a user creds file (JWT and nkey seed, as `nsc generate creds` writes) for a server in operator/JWT mode"),
	external(EnvNATSTLSCAFile, "unset (system roots)", "PEM CA bundle that verifies the NATS server's certificate; setting it requires TLS even with a `nats://` URL"),
	external(EnvNATSTLSCertFile, "unset", "client certificate and key (PEM) for mutual TLS; set both or neither"),
	external(EnvNATSTLSKeyFile, "", ""),
	rabbitmqVariables[0], rabbitmqVariables[1], rabbitmqVariables[2], rabbitmqVariables[3], rabbitmqVariables[4],
	rabbitmqVariables[5], rabbitmqVariables[6], rabbitmqVariables[7], rabbitmqVariables[8],
	dur("RETENTION", DefaultRetention, "Retention",
		"how long processed IDs, dispatched inbox rows and published events are kept (a Go duration or `30d`; never less than the redelivery horizon, see [intake](intake.md))",
		func(c *Config) *time.Duration { return &c.Retention }).checked(func(c Config) error { return positive(c.Retention) }),
	dur("PRUNE_EVERY", retention.DefaultEvery, "PruneEvery", "", func(c *Config) *time.Duration { return &c.PruneEvery }).
		checked(func(c Config) error { return positive(c.PruneEvery) }),
	dur("AUDIT_EVERY", auditschedule.DefaultEvery, "AuditEvery",
		"how often the audit schedule compares the ledger with Stripe's PaymentIntents and Refunds and SendGrid's events; see [operations](operations.md#the-audit)",
		func(c *Config) *time.Duration { return &c.AuditEvery }).checked(func(c Config) error { return positive(c.AuditEvery) }),
	num("AUDIT_MAX_REQUESTS", audit.DefaultMaxRequests, "AuditMaxRequests",
		"Stripe requests one audit run may make (≥ 1); a run that spends them stops and the next goes on from its checkpoint",
		func(c *Config) *int { return &c.AuditMaxRequests }).checked(func(c Config) error { return atLeast(c.AuditMaxRequests, 1) }),
	{name: "QUARANTINE_RETENTION", field: "QuarantineRetention", docDefault: "`" + short(DefaultQuarantineRetention) + "`, or `RETENTION` when longer",
		load: func(c *Config, v string, _ bool) error {
			if err := parseInto(&c.QuarantineRetention, v, 0); err != nil {
				return err
			}
			if c.QuarantineRetention == 0 {
				// Unset: never shorter than RETENTION (loaded before it), so
				// that a RETENTION raised for a long horizon does not make the
				// default refused.
				c.QuarantineRetention = max(DefaultQuarantineRetention, c.Retention)
			}
			return nil
		},
		check: func(c Config) error { return positive(c.QuarantineRetention) },
		doc:   "how long a quarantine row is kept after the last copy of its message arrived; pruned by the same schedule (`PRUNE_EVERY`). A Go duration or `30d`; the worker refuses to start (exit 2) when it is shorter than the redelivery horizon, naming both. See [operations](operations.md#quarantine-retention)"},
	external("TEMPORAL_ADDRESS", "`localhost:7233`", "the Temporal frontend and namespace (envconfig)"),
	external("TEMPORAL_NAMESPACE", "`default`", ""),
	external("TEMPORAL_API_KEY", "unset", "Temporal Cloud API key; turns TLS on (envconfig)"),
	external("TEMPORAL_TLS", "off", "TLS and mTLS to Temporal (envconfig)"),
	external("TEMPORAL_TLS_CLIENT_CERT_PATH", "", ""),
	external("TEMPORAL_TLS_CLIENT_CERT_DATA", "", ""),
	external("TEMPORAL_TLS_CLIENT_KEY_PATH", "", ""),
	external("TEMPORAL_TLS_CLIENT_KEY_DATA", "", ""),
	external("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "", ""),
	external("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "", ""),
	external("TEMPORAL_TLS_SERVER_NAME", "", ""),
	external("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "", ""),
	external("TEMPORAL_CLIENT_AUTHORITY", "unset", "the gRPC `:authority` header (envconfig)"),
	external(GRPCMetaPrefix+"*", "none", "each becomes a gRPC header on every request (envconfig)"),
	external("TEMPORAL_PROFILE", "`default`, `~/.config/temporalio/temporal.toml`", "which profile of which `temporal.toml` to start from; variables override it (envconfig)"),
	external("TEMPORAL_CONFIG_FILE", "", ""),
	external("TEMPORAL_CODEC_ENDPOINT", "unset", "read by envconfig and **ignored**: the processes encrypt payloads themselves with the keys below; a remote codec is for the UI and the CLI"),
	external("TEMPORAL_CODEC_AUTH", "", ""),
	external(temporalclient.EnvCompression, "`auto`", "compression of requests to Temporal: `auto` is `none` when `TEMPORAL_ADDRESS` is literally `localhost`, a loopback, private (RFC 1918, `fc00::/7`) or link-local address, else `gzip`; any other DNS name keeps `gzip`. `gzip` (the SDK's default) saves bandwidth, `none` the CPU of compressing every call on both sides"),
	external(codec.EnvKeys, "unset (payloads in plaintext)", "payload encryption keys, comma-separated `id:base64-32-byte-key` (or one per line in the file); the first encrypts. Set one, not both"),
	external(codec.EnvKeyFile, "", ""),
	external(codec.EnvRequire, "`false`", "`true` refuses every payload the codec did not encrypt, in the worker, the starter and the codec server: a plaintext workflow or activity input fails instead of being read. Needs the keys: without them the worker and the starter exit 2"),
	external(codec.EnvServerAddr, "off, required with the address (≥ 16 characters), the dev server's UI", "the worker's codec server: listen address, bearer token, allowed origins"),
	external(codec.EnvToken, "", ""),
	external(codec.EnvCORSOrigins, "", ""),
}

// str is a string variable.
func str(name, def, field, doc string, f func(*Config) *string) variable {
	return variable{name: name, def: def, field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error { *f(c) = v; return nil }}
}

// rate is a rate-limit variable: RATE or RATE,BURST, requests per second.
func rate(name, def, field, doc string, f func(*Config) *ratelimit.Rate) variable {
	return variable{name: name, def: def, field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error {
			r, err := parseRate(v)
			*f(c) = r
			return err
		}}
}

// parseRate reads RATE or RATE,BURST.
func parseRate(v string) (ratelimit.Rate, error) {
	rs, bs, hasBurst := strings.Cut(strings.TrimSpace(v), ",")
	r, err := strconv.ParseFloat(strings.TrimSpace(rs), 64)
	if err != nil || r < 0 || r > 1e6 {
		return ratelimit.Rate{}, fmt.Errorf("%q: want requests per second (0 to 1000000), optionally followed by ,BURST", v)
	}
	out := ratelimit.Rate{PerSecond: r, Burst: max(1, int(r))}
	if hasBurst {
		b, err := strconv.Atoi(strings.TrimSpace(bs))
		if err != nil || b < 1 {
			return ratelimit.Rate{}, fmt.Errorf("%q: the burst after the comma must be a whole number ≥ 1", v)
		}
		out.Burst = b
	}
	return out, nil
}

// addr is a listen or server address that "off" turns off (stored as "").
func addr(name, def, field, doc string, f func(*Config) *string) variable {
	return variable{name: name, def: def, field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error {
			if v == "off" {
				v = ""
			}
			*f(c) = v
			return nil
		}}
}

// num is a whole-number variable.
func num(name string, def int, field, doc string, f func(*Config) *int) variable {
	return variable{name: name, def: strconv.Itoa(def), field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error {
			n, err := strconv.Atoi(v)
			*f(c) = n
			if err != nil {
				return fmt.Errorf("%q: not a whole number", v)
			}
			return nil
		}}
}

// dur is a duration variable (a Go duration or a number of days); zero
// means the default.
func dur(name string, def time.Duration, field, doc string, f func(*Config) *time.Duration) variable {
	return variable{name: name, def: short(def), field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error { return parseInto(f(c), v, def) }}
}

// flag is a boolean variable, false by default.
func flag(name, field, doc string, f func(*Config) *bool) variable {
	return variable{name: name, def: "false", field: field, doc: doc,
		load: func(c *Config, v string, _ bool) error { return parseFlag(f(c), v) }}
}

// parseFlag parses v, true or false, into dst.
func parseFlag(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	*dst = b
	if err != nil {
		return fmt.Errorf("%q: use true or false", v)
	}
	return nil
}

// external is a variable another loader reads (envconfig, the keyring, the
// codec server, NATS authentication); shown is its default column.
func external(name, shown, doc string) variable {
	return variable{name: name, docDefault: shown, doc: doc}
}

// checkSources refuses an unknown, repeated or unavailable kind, and
// jetstream without a broker.
func checkSources(c Config) error {
	seen := map[string]bool{}
	for _, k := range c.Sources {
		switch {
		case !slices.Contains(SourceKinds, k):
			return fmt.Errorf("%q: unknown source %q; use %s", strings.Join(c.Sources, ","), k, strings.Join(SourceKinds, ", "))
		case seen[k]:
			return fmt.Errorf("%q: source %q is listed twice", strings.Join(c.Sources, ","), k)
		case !slices.Contains(AvailableSources, k):
			return fmt.Errorf("%q: source %q is not built into this worker yet (available: %s)", strings.Join(c.Sources, ","), k, strings.Join(AvailableSources, ", "))
		case k == SourceJetStream && !c.NATS.Enabled():
			return fmt.Errorf("%q: source jetstream needs NATS_URL (it is off)", strings.Join(c.Sources, ","))
		}
		seen[k] = true
	}
	return nil
}

// ifNATS runs check only when the broker side is on (NATS_URL not off).
func ifNATS(check func(Config) error) func(Config) error {
	return func(c Config) error {
		if !c.NATS.Enabled() {
			return nil
		}
		return check(c)
	}
}

// checked adds Validate's check.
func (v variable) checked(check func(Config) error) variable { v.check = check; return v }

// shown sets the default column of the documentation.
func (v variable) shown(s string) variable { v.docDefault = s; return v }

// parseInto parses v into d; zero means def.
func parseInto(d *time.Duration, v string, def time.Duration) error {
	if v == "" {
		*d = def
		return nil
	}
	got, err := parseDuration(v)
	if err != nil {
		return fmt.Errorf("%q: not a duration (use e.g. 20h, 90s): %w", v, err)
	}
	if got == 0 {
		got = def
	}
	*d = got
	return nil
}

func positive(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s: must be positive", d)
	}
	return nil
}

func atLeast(n, low int) error {
	if n < low {
		return fmt.Errorf("%d: must be at least %d", n, low)
	}
	return nil
}

func within(n, low, high int) error {
	if n < low || n > high {
		return fmt.Errorf("%d: must be between %d and %d", n, low, high)
	}
	return nil
}

// streamName checks a JetStream stream name the way the server takes it.
func streamName(v string) error {
	if v == "" || strings.ContainsAny(v, ". *>\t") {
		return fmt.Errorf("%q: must be non-empty, without '.', '*', '>' or spaces", v)
	}
	return nil
}

// short writes d as the documentation does: 2m, 20h, 720h, 10s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func shortList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = short(d)
	}
	return strings.Join(parts, ",")
}

// loadTable loads every variable of the table into c through get, naming
// the variable in each error.
func (c *Config) loadTable(env Env) []error {
	var errs []error
	for _, v := range variables {
		if v.load == nil {
			continue
		}
		raw, given := env.LookupEnv(v.name)
		raw = strings.TrimSpace(raw)
		given = given && raw != ""
		value := v.def
		if given {
			value = raw
		}
		if err := v.load(c, value, given); err != nil {
			errs = append(errs, fmt.Errorf("%s=%w", v.name, err))
		}
	}
	return errs
}

// checkTable runs the table's checks, naming the variable in each error.
func (c Config) checkTable() []error {
	var errs []error
	for _, v := range variables {
		if v.check == nil {
			continue
		}
		if err := v.check(c); err != nil {
			errs = append(errs, fmt.Errorf("%s=%w", v.name, err))
		}
	}
	return errs
}

// byField names the variables of the fields under prefix (Workflows.,
// NATS.JetStream.) that err, a package's own Validate error, mentions:
// prefixed to it, they tell the operator what to change.
func byField(prefix string, fields []string, err error) error {
	var names []string
	for _, v := range variables {
		f, ok := strings.CutPrefix(v.field, prefix)
		if !ok || f == "" {
			continue
		}
		for _, want := range fields {
			if want == f {
				names = append(names, v.name)
			}
		}
	}
	if len(names) == 0 {
		return err
	}
	return fmt.Errorf("%s: %w", strings.Join(names, ", "), err)
}

// fieldWord finds the Go field names a message mentions.
var fieldWord = regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)

// namedByMessage is byField for a package whose Validate names fields only
// in its message (workflows.Config).
func namedByMessage(prefix string, err error) error {
	return byField(prefix, fieldWord.FindAllString(err.Error(), -1), err)
}

// namedByFieldErrors is byField for each of a Validate's jetstream.FieldError.
func namedByFieldErrors(prefix string, err error) []error {
	var all []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	} else {
		all = []error{err}
	}
	out := make([]error, 0, len(all))
	for _, e := range all {
		var fe *jetstream.FieldError
		if errors.As(e, &fe) {
			e = byField(prefix, fe.Fields, e)
		}
		out = append(out, e)
	}
	return out
}
