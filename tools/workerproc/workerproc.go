// Package workerproc builds the worker binary and runs it as a child
// process that tests and the soak can kill with SIGKILL and start again, so
// crash behaviour is checked on the real binary, not on an in-process copy.
package workerproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles ./worker of the repository at root into dir and returns
// the binary's path. tags are Go build tags: the crash tests pass
// FailpointsTag, whose binary can be armed to kill itself at a named point;
// the default build cannot.
func Build(ctx context.Context, root, dir string, tags ...string) (string, error) {
	bin := filepath.Join(dir, "worker")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./worker")...) //nolint:gosec // fixed program, tags from tests
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./worker: %w\n%s", err, out)
	}
	return bin, nil
}

// FailpointsTag is the build tag that compiles internal/leaf/failpoint's kill
// points into the worker.
const FailpointsTag = "failpoints"

// Proc is one running worker process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	mu   sync.Mutex
	logs bytes.Buffer
}

// Start runs bin with env (the whole environment: nothing is inherited).
func Start(bin string, env []string) (*Proc, error) {
	p := &Proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin) //nolint:noctx // stopped by Stop or Kill, not by a context
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = (*lockedWriter)(p), (*lockedWriter)(p)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type lockedWriter Proc

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.Write(b)
}

// Logs returns everything the process wrote so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Pid is the process ID, to read the process's resource use from /proc.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Killed reports whether the process died of SIGKILL.
func (p *Proc) Killed() bool {
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Env is the environment of a worker talking to the given services, with the
// recognisable fake keys tests check logs against.
func Env(c Config) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + c.DatabaseURL,
		"TEMPORAL_ADDRESS=" + c.TemporalAddress,
		"TEMPORAL_NAMESPACE=default",
		"EFFECTIVELY_TASK_QUEUE=" + c.TaskQueue,
		"STRIPE_API_KEY=" + FakeStripeKey,
		"STRIPE_BASE_URL=" + c.StripeURL,
		"SENDGRID_API_KEY=" + FakeSendGridKey,
		"SENDGRID_BASE_URL=" + c.SendGridURL,
		"EFFECTIVELY_HEALTH_ADDR=off",
		"LOG_LEVEL=debug",
		// A small pool: test packages run side by side (the soak's three
		// workers, the e2e tests' worker processes) and Postgres here
		// allows 100 connections in all.
		"DATABASE_MAX_CONNS=10",
		// A killed attempt is retried once its start-to-close expires.
		"PAYMENT_START_TO_CLOSE=5s",
		"EMAIL_START_TO_CLOSE=5s",
	}
	if c.NATSURL == "" {
		env = append(env, "NATS_URL=off")
	} else {
		env = append(env, "NATS_URL="+c.NATSURL)
	}
	return append(env, c.Extra...)
}

// Config names the services a worker process talks to.
type Config struct {
	DatabaseURL     string
	TemporalAddress string
	TaskQueue       string
	StripeURL       string
	SendGridURL     string
	// NATSURL is the broker; empty disables broker intake.
	NATSURL string
	// Extra is appended to the environment (NAME=value).
	Extra []string
}

// Recognisable fake secrets: no log line of the worker may contain them.
const (
	FakeStripeKey   = "sk_test_SECRET_stripe_4f1c9e"
	FakeSendGridKey = "SG.SECRET_sendgrid_7b2d0a"
)

// HealthAddr returns a free loopback address for a worker's health
// listener (EFFECTIVELY_HEALTH_ADDR).
func HealthAddr() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// AwaitReady polls the worker's GET /readyz at addr until it answers 200
// (Postgres, Temporal and every source checked), or ctx ends.
func AwaitReady(ctx context.Context, p *Proc, addr string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			cause := p.err
			if cause == nil {
				cause = errors.New("exit status 0")
			}
			return fmt.Errorf("worker exited before it was ready: %w\n%s", cause, p.Logs())
		case <-ctx.Done():
			return fmt.Errorf("worker not ready at %s: %w", addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
