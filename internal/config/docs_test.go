package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/effectively/effectively/tools/natstest"
)

// documentedVariables returns the variables named in the first column of
// the table under "## Variables" in docs/configuration.md.
func documentedVariables(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Variables\n")
	if !ok {
		t.Fatal("docs/configuration.md has no ## Variables section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`")
	seen := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			if seen[m[1]] {
				t.Errorf("docs/configuration.md lists %s twice", m[1])
			}
			seen[m[1]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// mapEnv is an environment of fixed values that records what is read.
type mapEnv struct {
	vals map[string]string
	read map[string]bool
}

func (m *mapEnv) LookupEnv(name string) (string, bool) {
	m.read[name] = true
	v, ok := m.vals[name]
	return v, ok
}

func (m *mapEnv) Environ() []string {
	m.read[GRPCMetaPrefix+"*"] = true
	var out []string
	for k, v := range m.vals {
		out = append(out, k+"="+v)
	}
	return out
}

// everyVariable sets every documented variable to a value the worker
// accepts. A documented variable without a value here fails the test, so
// that the table, this list and the code move together.
var everyVariable = map[string]string{
	"DATABASE_URL": "postgres://ro@db:5432/effectively", "DATABASE_MAX_CONNS": "16",
	"EFFECTIVELY_TASK_QUEUE": "orders",
	"STRIPE_API_KEY":         "sk_test_x", "STRIPE_BASE_URL": "http://127.0.0.1:12111",
	"SENDGRID_API_KEY": "SG.x", "SENDGRID_BASE_URL": "http://127.0.0.1:12112",
	"REFUND_AWAIT_PAYMENT": "2h", "REFUND_PENDING_MAX_WAIT": "240h", "STRIPE_RATE_LIMIT": "90,120", "STRIPE_ENDPOINT_RATE_LIMIT": "22", "SENDGRID_RATE_LIMIT": "50",
	"EMAIL_FROM": "shop@example.com", "EMAIL_FROM_NAME": "Shop", "EMAIL_POLICY": "at-most-once",
	"PAYMENT_START_TO_CLOSE": "1m", "PAYMENT_SCHEDULE_TO_CLOSE": "10h",
	"EMAIL_START_TO_CLOSE": "30s", "EMAIL_SCHEDULE_TO_CLOSE": "12h", "LOCAL_START_TO_CLOSE": "5s",
	"PAYMENT_PROCESSING_POLL": "5m", "PAYMENT_PROCESSING_MAX_WAIT": "24h", "EFFECTIVELY_DRAIN_TIMEOUT": "15s",
	"EFFECTIVELY_WEBHOOK_ADDR": "127.0.0.1:9082", "STRIPE_WEBHOOK_SECRETS": "whsec_a,whsec_b", "STRIPE_WEBHOOK_TOLERANCE": "120s",
	"SENDGRID_WEBHOOK_PUBLIC_KEY": "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
	"SENDGRID_WEBHOOK_TOLERANCE":  "120s", "EMAIL_RESEND_GRACE": "10s",
	"EFFECTIVELY_HEALTH_ADDR": "127.0.0.1:9081", "EFFECTIVELY_PPROF_ADDR": "127.0.0.1:6060", "LOG_LEVEL": "debug",
	"NATS_URL": "nats://nats:4222", "EFFECTIVELY_SOURCES": "jetstream,rabbitmq", "NATS_STREAM": "S", "NATS_SUBJECT": "s.messages.>", "NATS_CONSUMER": "c", "NATS_CONSUMER_PER_ROUTE": "true", "NATS_ROUTE_BACKLOG_WAITS": "true",
	"NATS_ACK_WAIT": "10s", "EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE": "true", "EFFECTIVELY_ROUTE_EFFECT_SLOTS": "50", "EFFECTIVELY_START_RATE": "30", "EFFECTIVELY_START_AHEAD": "2s", "NATS_BACKOFF": "1m,2m", "NATS_DEAD_LETTER_STREAM": "DEAD", "NATS_MAX_DELIVER": "4",
	"NATS_HANDLERS": "2", "NATS_STARTERS": "3",
	"NATS_DUPLICATE_WINDOW": "1m", "NATS_EVENTS_STREAM": "E", "NATS_EVENTS_PREFIX": "s.events",
	"RABBITMQ_URL": "amqp://worker:pw@rabbitmq:5672/shop", "RABBITMQ_EXCHANGE": "orders.x", "RABBITMQ_QUEUE": "orders.q",
	"RABBITMQ_MESSAGE_TTL": "3d", "RABBITMQ_MAX_DELIVER": "4", "RABBITMQ_PREFETCH": "50", "RABBITMQ_HANDLERS": "8",
	"RABBITMQ_EVENTS_EXCHANGE": "orders.events", "RABBITMQ_EVENTS_QUEUE": "orders.events.all",
	// One credential (the user): the token, seed and creds files are "" here
	// since they exclude it; TestNATSAuthAccepted loads them. The TLS files
	// are made by the test.
	"NATS_USER": "worker", "NATS_PASSWORD": "pw", "NATS_PASSWORD_FILE": "", "NATS_TOKEN": "", "NATS_TOKEN_FILE": "",
	"NATS_NKEY_SEED_FILE": "", "NATS_CREDS_FILE": "", "NATS_TLS_CA_FILE": "", "NATS_TLS_CERT_FILE": "", "NATS_TLS_KEY_FILE": "",
	"RETENTION": "40d", "QUARANTINE_RETENTION": "50d", "PRUNE_EVERY": "2h", "AUDIT_EVERY": "3h", "AUDIT_MAX_REQUESTS": "500", "EFFECTIVELY_KEY_NAMESPACE": "eu-1",
	"TEMPORAL_ADDRESS": "temporal:7233", "TEMPORAL_NAMESPACE": "shop", "TEMPORAL_API_KEY": "key",
	"TEMPORAL_TLS": "true", "TEMPORAL_TLS_CLIENT_CERT_PATH": "", "TEMPORAL_TLS_CLIENT_CERT_DATA": "",
	"TEMPORAL_TLS_CLIENT_KEY_PATH": "", "TEMPORAL_TLS_CLIENT_KEY_DATA": "", "TEMPORAL_TLS_SERVER_CA_CERT_PATH": "",
	"TEMPORAL_TLS_SERVER_CA_CERT_DATA": "", "TEMPORAL_TLS_SERVER_NAME": "temporal.example.com",
	"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "false", "TEMPORAL_CLIENT_AUTHORITY": "temporal.example.com",
	"TEMPORAL_GRPC_META_*": "", // stands for the family; set as TEMPORAL_GRPC_META_X_TENANT below
	"TEMPORAL_PROFILE":     "", "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml",
	"TEMPORAL_CODEC_ENDPOINT": "", "TEMPORAL_CODEC_AUTH": "",
	"EFFECTIVELY_GRPC_COMPRESSION": "none",
	"EFFECTIVELY_CODEC_KEYS":       "k1:" + strings.Repeat("A", 43) + "=", "EFFECTIVELY_CODEC_KEY_FILE": "",
	"EFFECTIVELY_CODEC_REQUIRE":     "true",
	"EFFECTIVELY_CODEC_SERVER_ADDR": "127.0.0.1:8234", "EFFECTIVELY_CODEC_TOKEN": strings.Repeat("t", 16),
	"EFFECTIVELY_CODEC_CORS_ORIGINS":     "https://ui.example.com",
	"EFFECTIVELY_ALLOW_PUBLIC_LISTENERS": "true", "EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS": "false",
	"EFFECTIVELY_PUBLIC_LISTENERS": "health",
	"EFFECTIVELY_API_ADDR":         "127.0.0.1:9083", "EFFECTIVELY_API_TOKENS_FILE": "/etc/effectively/api-tokens",
	"EFFECTIVELY_API_TLS_CERT_FILE": "", "EFFECTIVELY_API_TLS_KEY_FILE": "", "EFFECTIVELY_API_CLIENT_CA_FILE": "",
	"EFFECTIVELY_API_TOKEN_RATE": "50", "EFFECTIVELY_API_MAX_WAIT": "20s",
}

// TestDocumentedVariablesAreRead compares the configuration table with what
// Load reads: every variable read is documented, every documented variable
// is read, with nothing set and with everything set.
func TestDocumentedVariablesAreRead(t *testing.T) {
	documented := documentedVariables(t)
	if len(documented) < 30 {
		t.Fatalf("found %d variables in the table: is it still a table?", len(documented))
	}
	read := Names()
	for _, n := range read {
		if !slices.Contains(documented, n) {
			t.Errorf("config reads %s, which docs/configuration.md does not list", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(read, n) {
			t.Errorf("docs/configuration.md lists %s, which config never reads", n)
		}
	}

	// Everything set: still the same variables, and a valid configuration.
	vals := map[string]string{}
	for _, n := range documented {
		v, ok := everyVariable[n]
		if !ok {
			t.Errorf("everyVariable has no value for the documented %s", n)
		}
		if !strings.HasSuffix(n, "*") && v != "" {
			vals[n] = v
		}
	}
	for n := range everyVariable {
		if !slices.Contains(documented, n) {
			t.Errorf("everyVariable sets %s, which docs/configuration.md does not list", n)
		}
	}
	vals[GRPCMetaPrefix+"X_TENANT"] = "shop"
	pki := natstest.NewPKI(t)
	vals["NATS_TLS_CA_FILE"], vals["NATS_TLS_CERT_FILE"], vals["NATS_TLS_KEY_FILE"] = pki.CA, pki.ClientCert, pki.ClientKey
	env := &mapEnv{vals: vals, read: map[string]bool{}}
	c, err := LoadEnv(env)
	if err != nil {
		t.Fatalf("every variable set: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("every variable set: %v", err)
	}
	for _, n := range documented {
		if !env.read[n] {
			t.Errorf("with every variable set, %s is not read", n)
		}
	}
	if c.Temporal.Options.HostPort != "temporal:7233" || c.Temporal.Options.Namespace != "shop" || c.Temporal.Keys == nil ||
		!c.Temporal.RequireEncryption || c.CodecServer.Addr != "127.0.0.1:8234" || c.TaskQueue != "orders" || c.LogLevelOr(0) != -4 {
		t.Errorf("values not applied: temporal %s/%s, keys %v, require %v, codec server %q, task queue %q, log level %v",
			c.Temporal.Options.HostPort, c.Temporal.Options.Namespace, c.Temporal.Keys != nil, c.Temporal.RequireEncryption, c.CodecServer.Addr, c.TaskQueue, c.LogLevel)
	}
}
