package e2e

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

var (
	buildOnce sync.Once
	workerDir string // removed by TestMain once every test has run
	workerBin string
	buildErr  error
)

// workerBinary builds the worker binary once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { workerBin, buildErr = buildWorker() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

// buildWorker builds the worker into a directory of its own that outlives
// the test asking first (t.TempDir would not): every test of the package
// shares the binary.
func buildWorker() (string, error) {
	dir, err := os.MkdirTemp("", "effectively-worker-")
	if err != nil {
		return "", err
	}
	workerDir = dir
	return workerproc.Build(context.Background(), testenv.RepoRoot(), dir, workerproc.FailpointsTag)
}

// procStack is the real stack with the worker as a separate process that a
// test can kill.
type procStack struct {
	temporal *testsuite.DevServer
	client   client.Client
	sims     *testenv.Sims
	store    *store.Store
	intake   *intake.Intake
	cfg      workerproc.Config
	procs    []*workerproc.Proc
}

func newProcStack(t *testing.T, extraEnv ...string) *procStack {
	t.Helper()
	s := &procStack{temporal: testenv.StartTemporal(t), sims: testenv.StartSims(t)}
	s.client = s.temporal.Client()
	dbURL := storetest.NewDatabase(t)
	pool, err := store.Open(context.Background(), dbURL, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s.store = store.New(pool)
	const queue = "effectively-proc"
	s.intake, err = intake.New(s.store, s.client, intake.Config{TaskQueue: queue, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = workerproc.Config{
		DatabaseURL: dbURL, TemporalAddress: s.temporal.FrontendHostPort(), TaskQueue: queue,
		StripeURL: s.sims.StripeURL, SendGridURL: s.sims.SendGridURL, Extra: extraEnv,
	}
	t.Cleanup(func() { checkNoSecrets(t, s.procs) })
	return s
}

// start runs a worker process with extra environment.
func (s *procStack) start(t *testing.T, extraEnv ...string) *workerproc.Proc {
	t.Helper()
	cfg := s.cfg
	cfg.Extra = append(append([]string{}, cfg.Extra...), extraEnv...)
	p, err := workerproc.Start(workerBinary(t), workerproc.Env(cfg))
	if err != nil {
		t.Fatal(err)
	}
	s.procs = append(s.procs, p)
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	return p
}

// checkNoSecrets fails the test if any worker log line carries an API key.
func checkNoSecrets(t *testing.T, procs []*workerproc.Proc) {
	lines := 0
	for _, p := range procs {
		for _, line := range strings.Split(p.Logs(), "\n") {
			lines++
			if strings.Contains(line, workerproc.FakeStripeKey) || strings.Contains(line, workerproc.FakeSendGridKey) ||
				strings.Contains(line, "SECRET_stripe") || strings.Contains(line, "SECRET_sendgrid") {
				t.Errorf("a worker log line contains an API key: %s", line)
			}
		}
	}
	if len(procs) > 0 && lines < 3 {
		t.Errorf("the workers logged %d lines: the secrets check saw nothing", lines)
	}
}

// killedAt waits for the worker to die of SIGKILL at its failpoint.
func killedAt(t *testing.T, p *workerproc.Proc, point string) {
	t.Helper()
	select {
	case <-p.Done():
		if !p.Killed() {
			t.Fatalf("worker ended with %v, want SIGKILL at %s; logs:\n%s", p.Err(), point, p.Logs())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the worker did not reach failpoint %s within 60s; logs:\n%s", point, p.Logs())
	}
}

func (s *procStack) waitOutcome(t *testing.T, messageID string) workflows.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var st workflows.Status
	for {
		err := s.client.GetWorkflow(ctx, "order-placed/"+messageID, "").Get(ctx, &st)
		var notFound *serviceerror.NotFound
		if err == nil {
			return st
		}
		if !errors.As(err, &notFound) || ctx.Err() != nil {
			t.Fatalf("workflow of %s: %v", messageID, err)
		}
		time.Sleep(200 * time.Millisecond) // not started yet: still in the broker or the inbox
	}
}

// TestCrashWindows kills the real worker process at each failpoint of the
// effect path, restarts it, and checks what docs/guarantees.md promises for that
// window: one charge, receipts per the policy, one processed row, a terminal
// outcome. Every worker log line is checked for the API keys.
func TestCrashWindows(t *testing.T) {
	cases := []struct {
		point      string
		policy     string
		wantEmails int
	}{
		{failpoint.PaymentAfterClaim, "at-least-once", 1},
		// Created, not confirmed, nothing in Postgres but the claim: the
		// restart's create replays the same PaymentIntent under its key.
		{failpoint.PaymentAfterCreate, "at-least-once", 1},
		// Confirmed, neither the outcome nor the PaymentIntent's ID
		// recorded: the restart's create and confirm replay it.
		{failpoint.PaymentAfterCharge, "at-least-once", 1},
		{failpoint.PaymentAfterRecord, "at-least-once", 1},
		// The documented receipt window: send-then-record repeats the email…
		{failpoint.EmailAfterSend, "at-least-once", 2},
		// …record-then-send does not, and settles it as unknown.
		{failpoint.EmailAfterSend, "at-most-once", 1},
	}
	for _, tc := range cases {
		t.Run(tc.point+"/"+tc.policy, func(t *testing.T) {
			t.Parallel() // mostly waiting for timeouts; each case has its own stack
			s := newProcStack(t, "EMAIL_POLICY="+tc.policy)
			first := s.start(t, failpoint.EnvVar+"="+tc.point)
			id := "evt_" + strings.NewReplacer(".", "_").Replace(tc.point)
			res, err := s.intake.Accept(context.Background(), order(id, 77, "pm_card_visa"), "test")
			if err != nil || res.Status != intake.StatusStarted {
				t.Fatalf("accept = %+v, %v", res, err)
			}
			killedAt(t, first, tc.point)

			s.start(t) // the restarted worker, no failpoint
			st := s.waitOutcome(t, id)
			want := workflows.OutcomeCompleted
			if tc.policy == "at-most-once" && tc.point == failpoint.EmailAfterSend {
				want = workflows.OutcomeReceiptUnknown
			}
			if st.Outcome != want {
				t.Errorf("outcome = %q, want %q (%+v)", st.Outcome, want, st)
			}
			if n := s.sims.Stripe.Stats().ChargesByMessage[id]; n != 1 {
				t.Errorf("charges = %d, want exactly 1", n)
			}
			if n := s.sims.SendGrid.Stats().DeliveriesByKey["email:"+id]; n != tc.wantEmails {
				t.Errorf("receipts = %d, want %d", n, tc.wantEmails)
			}
			ms, err := s.store.Status(context.Background(), message.ConsumerOrderPlaced, id)
			if err != nil {
				t.Fatal(err)
			}
			if ms.Processed == nil || ms.Processed.Outcome != store.OutcomePaid || ms.Order.Status != store.OrderPaid {
				t.Errorf("postgres: processed = %+v, order = %+v", ms.Processed, ms.Order)
			}
			var rows int
			if err := s.store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM processed_messages WHERE message_id = $1`, id).Scan(&rows); err != nil || rows != 1 {
				t.Errorf("processed rows = %d, %v; want 1", rows, err)
			}
		})
	}
}
