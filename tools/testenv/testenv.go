// Package testenv builds real components for tests: a Temporal dev server
// from the Temporal CLI binary, the provider simulators behind the real
// stripe-go and sendgrid-go clients, a fresh Postgres database, and an
// in-process worker wired like the worker binary.
//
// Nothing here is skipped when a component is missing: a test that needs the
// Temporal CLI and cannot find it fails, saying how to build it.
package testenv

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/freeport"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/workflows"
)

// RepoRoot is the repository's root folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// TemporalCLI returns the path of the Temporal CLI: $TEMPORAL_CLI, else
// bin/temporal in the repository, else temporal on PATH.
func TemporalCLI(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p
	}
	if p := filepath.Join(RepoRoot(), "bin", "temporal"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p
	}
	t.Fatalf("testenv: the Temporal CLI is required; build it with `make bin/temporal` " +
		"(go install github.com/temporalio/cli/cmd/temporal@v1.5.1 into bin/) or set TEMPORAL_CLI")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartTemporal starts a dev server on a free port, with the search
// attributes registered and one task-queue partition, stopped when t ends.
func StartTemporal(t testing.TB) *testsuite.DevServer { return startTemporal(t, "") }

// StartTemporalWithFairness is StartTemporal with the matching service's
// fairness on (matching.enableFairness): each task queue dispatches the
// tasks of its fairness keys (a route's consumer, intake.StartOptions) in
// turn.
func StartTemporalWithFairness(t testing.TB) *testsuite.DevServer {
	return startTemporal(t, "", "--dynamic-config-value", "matching.enableFairness=true")
}

// StartTemporalWithMetrics is StartTemporal, with the matching service's
// fairness on when fairness is and dynamicConfig's KEY=VALUE settings,
// serving the server's own Prometheus metrics (RPC latencies, task
// timeouts) at the URL it returns.
func StartTemporalWithMetrics(t testing.TB, fairness bool, dynamicConfig ...string) (*testsuite.DevServer, string) {
	t.Helper()
	port := strconv.Itoa(freeport.Ports(t, 1)[0])
	args := []string{"--metrics-port", port}
	if fairness {
		dynamicConfig = append(dynamicConfig, "matching.enableFairness=true")
	}
	for _, kv := range dynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	return startTemporal(t, "", args...), "http://127.0.0.1:" + port + "/metrics"
}

// StartTemporalWithUI is StartTemporal with the Temporal UI served on
// 127.0.0.1:uiPort.
func StartTemporalWithUI(t testing.TB, uiPort string) *testsuite.DevServer {
	return startTemporal(t, uiPort)
}

func startTemporal(t testing.TB, uiPort string, extraArgs ...string) *testsuite.DevServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		EnableUI:         uiPort != "",
		UIPort:           uiPort,
		ExistingPath:     TemporalCLI(t),
		LogLevel:         "error",
		SearchAttributes: workflows.SearchAttributes("x", "x", 0),
		ClientOptions:    &client.Options{Logger: Logger(t)},
		ExtraArgs: append([]string{
			"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
			"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
		}, extraArgs...),
		Stdout: io.Discard,
		Stderr: io.Discard,
	})
	if err != nil {
		t.Fatalf("testenv: start the Temporal dev server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Logf("testenv: stop dev server: %v", err)
		}
	})
	return srv
}

// Logger returns a logger that writes through t.Log at warn level and above.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// Sims are the provider simulators, served over HTTP for the real clients.
type Sims struct {
	Stripe      *stripesim.Server
	SendGrid    *sendgridsim.Server
	StripeURL   string
	SendGridURL string
}

// StartSims serves both simulators until t ends.
func StartSims(t testing.TB) *Sims {
	t.Helper()
	s := &Sims{Stripe: stripesim.New(stripesim.Options{}), SendGrid: sendgridsim.New(sendgridsim.Options{})}
	st := httptest.NewServer(s.Stripe)
	sg := httptest.NewServer(s.SendGrid)
	t.Cleanup(st.Close)
	t.Cleanup(sg.Close)
	s.StripeURL, s.SendGridURL = st.URL, sg.URL
	return s
}

// PaymentClient returns a real stripe-go client pointed at the simulator.
func (s *Sims) PaymentClient(t testing.TB) *payment.Client { return s.paymentClient(t, nil) }

func (s *Sims) paymentClient(t testing.TB, limit func(http.RoundTripper) http.RoundTripper) *payment.Client {
	t.Helper()
	c, err := payment.New(payment.Config{APIKey: "sk_test_testenv", BaseURL: s.StripeURL, Timeout: 10 * time.Second, Limit: limit}) //nolint:gosec // fake key for the local Stripe simulator
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// EmailClient returns a real sendgrid-go client pointed at the simulator.
func (s *Sims) EmailClient(t testing.TB) *email.Client { return s.emailClient(t, nil) }

func (s *Sims) emailClient(t testing.TB, limit func(http.RoundTripper) http.RoundTripper) *email.Client {
	t.Helper()
	c, err := email.New(email.Config{APIKey: "SG.testenv", BaseURL: s.SendGridURL, From: "receipts@example.com", Timeout: 5 * time.Second, Limit: limit}) //nolint:gosec // fake key for the local SendGrid simulator
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// limit is the transport wrapper of one provider's shared rate limits, as
// the worker binary builds it; nil when neither rate is on.
func limit(t testing.TB, st *store.Store, provider string, global, endpoint ratelimit.Rate) func(http.RoundTripper) http.RoundTripper {
	t.Helper()
	wrap, err := ratelimit.Wrap(st, ratelimit.Config{Provider: provider, Global: global, Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return wrap
}

// Stack is every real component, with an in-process worker.
type Stack struct {
	Temporal  *testsuite.DevServer
	Client    client.Client
	Store     *store.Store
	DBURL     string
	Sims      *Sims
	Intake    *intake.Intake
	TaskQueue string
	Worker    worker.Worker
}

// StackOptions adjusts a Stack.
type StackOptions struct {
	// Workflows overrides the workflow configuration (short retries in tests).
	Workflows workflows.Config
	// EmailPolicy of the activities. Default at-least-once.
	EmailPolicy store.EmailPolicy
	// DataConverter, when set, is installed on a client dialled for the
	// stack, from which the worker and the intake are built; Stack.Client is
	// then that client. The dev server's own client (Temporal.Client())
	// keeps the default converter, so it sees payloads as stored.
	DataConverter converter.DataConverter
	// FailureConverter, when set, is installed on the same client as
	// DataConverter.
	FailureConverter converter.FailureConverter
	// Retention is the activities' pruning policy. The zero value makes
	// Prune refuse to run.
	Retention retention.Policy
	// Interceptors, when set, are installed on the stack's own client
	// (as DataConverter does), e.g. the tracing interceptor.
	Interceptors []interceptor.ClientInterceptor
	// UIPort, when set, serves the dev server's Temporal UI on
	// 127.0.0.1:UIPort.
	UIPort string
	// Audit configures the activities' Auditor (AuditLedger).
	Audit audit.Config
	// RateLimits, when any is on, pace the worker's provider calls as the
	// worker binary does (worker/deps.go): buckets shared in the stack's
	// database, 429s honoured. Zero: no limiter.
	RateLimits config.RateLimits
}

// NewStack starts a dev server, the simulators, a fresh database and a worker
// polling its own task queue.
func NewStack(t testing.TB, o StackOptions) *Stack {
	t.Helper()
	s := &Stack{Temporal: startTemporal(t, o.UIPort), Sims: StartSims(t), TaskQueue: "effectively-test"}
	s.Client = s.Temporal.Client()
	if o.DataConverter != nil || o.FailureConverter != nil || len(o.Interceptors) > 0 {
		c, err := client.Dial(client.Options{
			HostPort:         s.Temporal.FrontendHostPort(),
			DataConverter:    o.DataConverter,
			FailureConverter: o.FailureConverter,
			Interceptors:     o.Interceptors,
			Logger:           Logger(t),
		})
		if err != nil {
			t.Fatalf("testenv: dial Temporal with the stack's converters: %v", err)
		}
		t.Cleanup(c.Close) // registered before the worker's Stop, so it runs after it
		s.Client = c
	}
	s.DBURL = storetest.NewDatabase(t)
	pool, err := store.Open(context.Background(), s.DBURL, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s.Store = store.New(pool)

	cfg := o.Workflows
	if cfg.RetryInitialInterval == 0 {
		cfg.RetryInitialInterval = 100 * time.Millisecond
	}
	if cfg.RetryMaximumInterval == 0 {
		cfg.RetryMaximumInterval = time.Second
	}
	wfs, err := workflows.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Worker = worker.New(s.Client, s.TaskQueue, worker.Options{})
	wfs.Register(s.Worker)
	pay := s.Sims.paymentClient(t, limit(t, s.Store, metrics.ProviderStripe, o.RateLimits.Stripe, o.RateLimits.StripeEndpoint))
	mail := s.Sims.emailClient(t, limit(t, s.Store, metrics.ProviderSendGrid, o.RateLimits.SendGrid, ratelimit.Rate{}))
	auditor, err := audit.New(s.Store, pay, o.Audit)
	if err != nil {
		t.Fatal(err)
	}
	activities.Register(s.Worker, &activities.Activities{
		Store: s.Store, Payments: pay, Mailer: mail, EmailPolicy: o.EmailPolicy,
		Retention: o.Retention.Prune(), Auditor: auditor,
	})
	if err := s.Worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Worker.Stop)
	s.Intake, err = intake.New(s.Store, s.Client, intake.Config{TaskQueue: s.TaskQueue, Logger: Logger(t), EagerStart: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// RefuseInbox makes Postgres refuse every insert of messageID's inbox row
// (a trigger), as a poison message that can never be recorded, until the
// returned func lifts it.
func (s *Stack) RefuseInbox(t testing.TB, messageID string) (lift func()) {
	t.Helper()
	return RefuseInbox(t, s.Store.Pool(), messageID)
}

// RefuseInbox is Stack.RefuseInbox on the database of db: Postgres
// answers, and refuses the row (a trigger raises an error).
func RefuseInbox(t testing.TB, db *pgxpool.Pool, messageID string) (lift func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.message_id = TG_ARGV[0] THEN
				RAISE EXCEPTION 'simulated failure recording %', NEW.message_id;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_poison(`+pgQuote(messageID)+`);`); err != nil {
		t.Fatalf("testenv: refuse inbox rows of %s: %v", messageID, err)
	}
	return func() {
		t.Helper()
		if _, err := db.Exec(ctx, `DROP TRIGGER refuse_poison ON inbox`); err != nil {
			t.Fatalf("testenv: lift the refusal of %s: %v", messageID, err)
		}
	}
}

// pgQuote quotes s as an SQL string literal.
func pgQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ServeAPI serves api on a free loopback port until t ends (a serve error
// fails t) and returns the address and the context it serves under.
func ServeAPI(t testing.TB, api *httpapi.API) (addr string, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- api.ServeOn(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), ctx
}

// UnreachableIntake is an Intake on a Postgres that cannot be reached
// (nothing listens on port 1: every statement fails to connect within a
// second; pools connect lazily) and a FakeTemporal.
func UnreachableIntake(t testing.TB) *intake.Intake {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	in, err := intake.New(store.New(pool), NewFakeTemporal(), intake.Config{Logger: Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return in
}
