// Package kafkatest runs franz-go's kfake for tests: in process
// (NewCluster), or as a separate process (StartProcess) that a test can
// SIGKILL and start again on the same port with the same data, since the
// process persists its state (kfakeserver -data-dir -sync). It also creates
// topics and produces records.
package kafkatest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/tools/freeport"
)

// NewCluster starts an in-process kfake with one broker, closed when t
// ends, and returns it with its address.
func NewCluster(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// Admin returns an admin client for the broker at addr, closed when t ends.
func Admin(t testing.TB, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// CreateTopic creates topic with partitions partitions and the given
// topic configs (retention.ms, cleanup.policy, …).
func CreateTopic(t testing.TB, addr, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cfg := make(map[string]*string, len(configs))
	for k, v := range configs {
		cfg[k] = &v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Admin(t, addr).CreateTopic(ctx, partitions, 1, cfg, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", topic, err)
	}
}

// Producer returns a client that produces to the broker at addr, closed
// when t ends.
func Producer(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Produce produces records and waits until the broker stored each.
func Produce(t testing.TB, cl *kgo.Client, records ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("kafkatest: produce: %v", err)
	}
}

// Process is kfake running as a separate process (kfakeserver).
type Process struct {
	// Port is the broker's port on 127.0.0.1; it stays the same across
	// restarts.
	Port int
	// Dir holds the persisted state.
	Dir string
	bin string
	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
	// done is closed when the current process exited.
	done chan struct{}
}

// Addr is the broker's address.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Binary builds kfakeserver once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kfakeserver-") //nolint:usetesting // shared by every test of the binary, outlives the first
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "kfakeserver")
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", buildBin, "github.com/effectively/effectively/tools/kafkatest/kfakeserver")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build kfakeserver: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("kafkatest: %v", buildErr)
	}
	return buildBin
}

// StartProcess runs kfakeserver on a free loopback port with its state in
// a directory of t's, fsynced on every write; topics are created with
// partitions partitions. It is killed when t ends.
func StartProcess(t testing.TB, partitions int, topics ...string) *Process {
	t.Helper()
	p := &Process{Port: freeport.Ports(t, 1)[0], Dir: t.TempDir(), bin: Binary(t)}
	p.start(t, partitions, topics)
	t.Cleanup(func() { p.Kill(t) })
	return p
}

func (p *Process) start(t testing.TB, partitions int, topics []string) {
	t.Helper()
	if err := p.run(partitions, topics); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}

// run starts the process and waits until it listens.
func (p *Process) run(partitions int, topics []string) error {
	args := []string{"-port", strconv.Itoa(p.Port), "-data-dir", p.Dir, "-sync", "-auto-create", "-partitions", strconv.Itoa(partitions)}
	if len(topics) > 0 {
		args = append(args, "-topics", strings.Join(topics, ","))
	}
	p.mu.Lock()
	p.out = &bytes.Buffer{}
	p.cmd = exec.Command(p.bin, args...) //nolint:noctx,gosec // our own binary; stopped by Kill, not a context
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("start kfakeserver: %w", err)
	}
	done := make(chan struct{})
	p.done = done
	cmd := p.cmd
	p.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Output(), "kfake listening on") {
		select {
		case <-done:
			return fmt.Errorf("kfakeserver exited at start:\n%s", p.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kfakeserver not listening after 30s:\n%s", p.Output())
		}
	}
	return nil
}

// Output is what the current process printed.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

type lockedWriter struct{ p *Process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// Kill SIGKILLs the broker and waits for it to exit: a crash, with
// nothing written out beyond what was fsynced.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart SIGKILLs the broker and starts it again on the same port with
// the same data.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	if err := p.RestartErr(); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}

// RestartErr is Restart for a goroutine other than the test's: it returns
// the error instead of failing the test.
func (p *Process) RestartErr() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
	return p.run(0, nil)
}
