package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/failpoint"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/message"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/store/storetest"
	"github.com/effectively/effectively/internal/testenv"
	"github.com/effectively/effectively/workflows"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
)

// Recognisable fake secrets: no log line of the worker may contain them.
const (
	fakeStripeKey   = "sk_test_SECRET_stripe_4f1c9e"
	fakeSendGridKey = "SG.SECRET_sendgrid_7b2d0a"
)

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// workerBinary builds the worker binary once per test run.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "effectively-worker-")
		if err != nil {
			buildErr = err
			return
		}
		workerBin = filepath.Join(dir, "worker")
		cmd := exec.Command("go", "build", "-o", workerBin, "./worker")
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./worker: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

// procStack is the real stack with the worker as a separate process that a
// test can kill.
type procStack struct {
	temporal *testsuite.DevServer
	client   client.Client
	sims     *testenv.Sims
	store    *store.Store
	intake   *intake.Intake
	env      []string
	logs     []*bytes.Buffer
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
	s.env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"DATABASE_URL=" + dbURL,
		"TEMPORAL_ADDRESS=" + s.temporal.FrontendHostPort(),
		"TEMPORAL_NAMESPACE=default",
		"EFFECTIVELY_TASK_QUEUE=" + queue,
		"STRIPE_API_KEY=" + fakeStripeKey,
		"STRIPE_BASE_URL=" + s.sims.StripeURL,
		"SENDGRID_API_KEY=" + fakeSendGridKey,
		"SENDGRID_BASE_URL=" + s.sims.SendGridURL,
		"EFFECTIVELY_HEALTH_ADDR=off",
		"NATS_URL=off",
		"LOG_LEVEL=debug",
		// A killed attempt is retried once its start-to-close expires.
		"PAYMENT_START_TO_CLOSE=4s",
		"EMAIL_START_TO_CLOSE=4s",
	}, extraEnv...)
	t.Cleanup(func() { s.checkNoSecrets(t) })
	return s
}

// start runs the worker with extra environment; the returned channel yields
// its exit error.
func (s *procStack) start(t *testing.T, extraEnv ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(workerBinary(t))
	cmd.Env = append(append([]string{}, s.env...), extraEnv...)
	var logs bytes.Buffer
	s.logs = append(s.logs, &logs)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return cmd, done
}

// checkNoSecrets fails the test if any worker log line carries an API key.
func (s *procStack) checkNoSecrets(t *testing.T) {
	lines := 0
	for _, l := range s.logs {
		for _, line := range strings.Split(l.String(), "\n") {
			lines++
			if strings.Contains(line, fakeStripeKey) || strings.Contains(line, fakeSendGridKey) ||
				strings.Contains(line, "SECRET_stripe") || strings.Contains(line, "SECRET_sendgrid") {
				t.Errorf("a worker log line contains an API key: %s", line)
			}
		}
	}
	if len(s.logs) > 0 && lines < 3 {
		t.Errorf("the worker logged %d lines: the secrets check saw nothing", lines)
	}
}

// killedAt waits for the worker to die of SIGKILL at its failpoint.
func killedAt(t *testing.T, done <-chan error, logs *bytes.Buffer, point string) {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("worker exited with %v before %s; logs:\n%s", err, point, logs)
		}
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("worker ended with %v, want SIGKILL at %s; logs:\n%s", err, point, logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the worker did not reach failpoint %s within 60s; logs:\n%s", point, logs)
	}
}

func (s *procStack) waitOutcome(t *testing.T, messageID string) workflows.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var st workflows.Status
	if err := s.client.GetWorkflow(ctx, "order-placed/"+messageID, "").Get(ctx, &st); err != nil {
		t.Fatalf("workflow of %s: %v", messageID, err)
	}
	return st
}

// TestCrashWindows kills the real worker process at each failpoint of the
// effect path, restarts it, and checks what the README promises for that
// window: one charge, receipts per the policy, one processed row, a terminal
// outcome.
func TestCrashWindows(t *testing.T) {
	cases := []struct {
		point      string
		policy     string
		wantEmails int
	}{
		{failpoint.PaymentAfterClaim, "at-least-once", 1},
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
			_, done := s.start(t, failpoint.EnvVar+"="+tc.point)
			id := "evt_" + strings.NewReplacer(".", "_").Replace(tc.point)
			raw := order(id, 77, "pm_card_visa")
			res, err := s.intake.Accept(context.Background(), raw, "test")
			if err != nil || res.Status != intake.StatusStarted {
				t.Fatalf("accept = %+v, %v", res, err)
			}
			killedAt(t, done, s.logs[0], tc.point)

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
