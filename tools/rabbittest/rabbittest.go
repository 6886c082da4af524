// Package rabbittest gives each test uniquely named RabbitMQ queues and
// exchanges on the machine's server (deleted when the test ends), and, for
// tests that restart the broker, a RabbitMQ node of the test's own on other
// ports, so that restarting it disturbs no other test.
//
// The shared server is found through TEST_RABBITMQ_URL (default
// amqp://guest:guest@127.0.0.1:5672/). A server that does not answer fails
// the test, saying how to start it: it is never skipped.
package rabbittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// URL is the shared server tests use.
func URL() string {
	if u := os.Getenv("TEST_RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// Dial connects to url, closed when t ends; a server that does not answer
// fails t.
func Dial(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("rabbittest: RabbitMQ is required for this test and did not answer at %s: %v "+
			"(start it with `rabbitmq-server -detached`; .ci/run and make test-deps do)", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on a new connection to url.
func Channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	ch, err := Dial(t, url).Channel()
	if err != nil {
		t.Fatalf("rabbittest: channel: %v", err)
	}
	return ch
}

// Config returns a source configuration on url whose exchange, queue and
// dead-letter pair are named for t alone; they are deleted when t ends.
func Config(t testing.TB, url string) rabbitmq.Config {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	if len(name) > 80 {
		name = name[:80]
	}
	prefix := "test." + name + "." + hex.EncodeToString(b[:])
	cfg := rabbitmq.Config{
		URL: url, Exchange: prefix + ".x", Queue: prefix + ".q",
		DeadLetterExchange: prefix + ".dlx", DeadLetterQueue: prefix + ".dead",
	}
	t.Cleanup(func() {
		Delete(t, url, []string{cfg.Queue, cfg.DeadLetterQueue}, []string{cfg.Exchange, cfg.DeadLetterExchange})
	})
	return cfg
}

// Delete deletes queues and exchanges on url, logging what fails.
func Delete(t testing.TB, url string, queues, exchanges []string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Logf("rabbittest: delete %v: %v", queues, err)
		return
	}
	defer func() { _ = rabbitmq.CloseConn(conn) }()
	if err := rabbitmq.Remove(context.Background(), conn, queues, exchanges); err != nil {
		t.Logf("rabbittest: delete %v: %v", queues, err)
	}
}

// Node is a RabbitMQ node of a test's own: its own node name, ports,
// database and logs under a temporary folder.
type Node struct {
	Name string
	// URL is its AMQP URL (guest/guest, which it accepts from loopback).
	URL  string
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	t    testing.TB
}

// serverBin is RabbitMQ's own start script (Debian's /usr/sbin wrapper
// insists on the rabbitmq user and the shared node's configuration).
const serverBin = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// StartNode starts a node on a free port P (its Erlang distribution port
// is P+20000), waits until it accepts AMQP connections and stops it when t
// ends.
func StartNode(t testing.TB) *Node {
	t.Helper()
	if _, err := os.Stat(serverBin); err != nil {
		t.Fatalf("rabbittest: this test runs a RabbitMQ node of its own and found no %s: install Debian's rabbitmq-server package (.ci/run does)", serverBin)
	}
	dir, err := os.MkdirTemp("", "rabbittest-") //nolint:usetesting // kept when the test fails, for the node's logs
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rabbittest: a failed test keeps the node folder %s (logs in log/)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	var b [3]byte
	_, _ = rand.Read(b[:])
	n := &Node{Name: "rt" + hex.EncodeToString(b[:]) + "@localhost", dir: dir, t: t}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Queue metrics (list_queues messages, which Messages reads) every
	// 250ms instead of 5s, so that a test sees what the queue holds now.
	advanced := "[{rabbit, [{quorum_tick_interval, 250}, {collect_statistics_interval, 250}]}].\n"
	if err := os.WriteFile(filepath.Join(dir, "advanced.config"), []byte(advanced), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	// A free port can be taken by another process before the node binds
	// it (a shared machine): try another pair then.
	for try := 1; ; try++ {
		n.Port = freePortPair(t)
		n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
		conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users.guest = true\n", n.Port)
		if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		err := n.start()
		if err == nil {
			return n
		}
		if try == 3 || !strings.Contains(err.Error(), "eaddrinuse") {
			t.Fatal(err)
		}
		t.Logf("rabbittest: port %d was taken meanwhile; trying another", n.Port)
	}
}

// Start starts the node (again, keeping its queues and messages) and
// waits until it accepts AMQP connections.
func (n *Node) Start() {
	n.t.Helper()
	if err := n.start(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *Node) start() error {
	cmd := exec.CommandContext(context.Background(), serverBin) // stopped by signal (Stop, Kill), not by a context
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(),
		"HOME="+n.dir,
		"RABBITMQ_CONF_ENV_FILE=/dev/null",
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// Binding the distribution port on every interface is refused
		// here; loopback is enough for one node.
		"ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	logFile := filepath.Join(n.dir, "server.out")
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("rabbittest: start node: %w", err)
	}
	_ = out.Close()
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.done)
	deadline := time.Now().Add(90 * time.Second)
	for {
		conn, err := amqp.Dial(n.URL)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		exited := false
		select {
		case <-n.done:
			exited = true
		default:
		}
		if exited || time.Now().After(deadline) {
			n.Stop()
			logs, _ := os.ReadFile(logFile)
			return fmt.Errorf("rabbittest: node %s did not accept connections (exited: %v): %w\n%s", n.Name, exited, err, tail(logs, 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the node (SIGTERM to its process group: a clean shutdown) and
// waits for it.
func (n *Node) Stop() { n.signal(syscall.SIGTERM) }

// Kill kills the node with SIGKILL: a crash.
func (n *Node) Kill() { n.signal(syscall.SIGKILL) }

func (n *Node) signal(sig syscall.Signal) {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, sig)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.done
	}
	n.cmd = nil
}

// Restart stops the node cleanly and starts it again.
func (n *Node) Restart() {
	n.t.Helper()
	n.Stop()
	n.Start()
}

// ctl runs rabbitmqctl against the node.
func (n *Node) ctl(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", append([]string{"-n", n.Name}, args...)...) //nolint:gosec // fixed path
	cmd.Env = append(os.Environ(), "HOME="+n.dir, "RABBITMQ_CONF_ENV_FILE=/dev/null", "ERL_EPMD_ADDRESS=127.0.0.1")
	return cmd.CombinedOutput()
}

// Messages is how many messages queue holds, ready and delivered but not
// acked (rabbitmqctl list_queues messages); -1 when the node does not
// answer (a restart in progress) or has no such queue.
func (n *Node) Messages(queue string) int {
	out, err := n.ctl("list_queues", "-q", "--no-table-headers", "name", "messages")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			if v, err := strconv.Atoi(f[1]); err == nil {
				return v
			}
		}
	}
	return -1
}

// CloseConnections closes every client connection of the node
// (`rabbitmqctl close_all_connections`): a connection-level fault, the
// broker itself staying up.
func (n *Node) CloseConnections() {
	n.t.Helper()
	if out, err := n.ctl("close_all_connections", "rabbittest fault"); err != nil {
		n.t.Fatalf("rabbittest: close_all_connections on %s: %v\n%s", n.Name, err, out)
	}
}

// freePortPair finds a loopback port P such that P and P+20000 (the node's
// distribution port) are both free.
func freePortPair(t testing.TB) int {
	t.Helper()
	for range 200 {
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := l.Addr().(*net.TCPAddr)
		p := addr.Port
		_ = l.Close()
		if p < 10000 || p+20000 > 65535 {
			// Outside the range: pick one ourselves.
			var b [2]byte
			_, _ = rand.Read(b[:])
			p = 20000 + int(b[0])<<8%25000 + int(b[1])
		}
		if free(p) && free(p+20000) {
			return p
		}
	}
	t.Fatal("rabbittest: no free port pair for a node")
	return 0
}

func free(p int) bool {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
