package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	intakejs "github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/cluster"
	"github.com/effectively/effectively/workflows"
)

// TemporalCLIVersion is the Temporal CLI built when bin/temporal is missing.
// Later releases carry replace directives and cannot be go-installed.
const TemporalCLIVersion = "v1.5.1"

type stack struct {
	root, state string
	instance    string
	out         io.Writer
	procs       []*exec.Cmd
	cleanups    []func()
}

func (s *stack) close() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = p.Process.Kill()
			}
		}
	}
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	root, err := findRoot()
	if err != nil {
		return err
	}
	if o.instance == "" {
		o.instance = "dev"
	}
	state := o.stateDir
	if !filepath.IsAbs(state) {
		state = filepath.Join(root, state)
	}
	s := &stack{root: root, state: state, out: out, instance: o.instance}
	defer s.close()
	if !o.keep {
		_ = os.RemoveAll(filepath.Join(s.state, "temporal"))
	}
	for _, d := range []string{"bin", "logs", "temporal"} {
		if err := os.MkdirAll(filepath.Join(s.state, d), 0o750); err != nil {
			return err
		}
	}

	temporalBin, err := s.ensureTemporalCLI(ctx)
	if err != nil {
		return err
	}
	step(out, "building worker and starter")
	for _, b := range []string{"worker", "starter"} {
		if err := s.goCmd(ctx, "build", "-o", filepath.Join(s.state, "bin", b), "./"+b); err != nil {
			return fmt.Errorf("build %s: %w", b, err)
		}
	}

	dbURL, err := s.postgres(ctx, !o.keep)
	if err != nil {
		return err
	}

	var tAddr, uiURL string
	if os.Getenv("EFFECTIVELY_TEMPORAL") == "cluster" {
		tAddr, err = s.startCluster(ctx, dbURL, !o.keep)
	} else {
		tAddr, uiURL, err = s.startTemporal(ctx, temporalBin)
	}
	if err != nil {
		return err
	}

	stripeSim := stripesim.New(stripesim.Options{Latency: 5 * time.Millisecond})
	sendgridSim := sendgridsim.New(sendgridsim.Options{Latency: 5 * time.Millisecond})
	stripeURL, err := s.serve(ctx, "stripe simulator", "127.0.0.1:12111", stripeSim)
	if err != nil {
		return err
	}
	sendgridURL, err := s.serve(ctx, "sendgrid simulator", "127.0.0.1:12112", sendgridSim)
	if err != nil {
		return err
	}

	healthAddr, err := freeAddr("127.0.0.1:8081")
	if err != nil {
		return err
	}
	// BROKER picks the broker the examples are published to: nats
	// (JetStream, the default), kafka (kfake as a process) or rabbitmq
	// (the local server).
	var (
		natsEnv []string
		natsOn  bool
	)
	publish, via := []string{"publish"}, "JetStream"
	switch b := os.Getenv(EnvBroker); b {
	case "", "nats":
		natsEnv, natsOn = s.broker(ctx, !o.keep)
	case "kafka":
		if natsEnv, err = s.kafka(ctx, !o.keep); err != nil {
			return err
		}
		natsOn, publish, via = true, []string{"publish", "--broker", "kafka"}, "Kafka"
	case "rabbitmq":
		if natsEnv, err = s.rabbitBroker(!o.keep); err != nil {
			return err
		}
		natsOn, publish, via = true, []string{"publish", "--broker", "rabbitmq"}, "RabbitMQ"
	default:
		return fmt.Errorf("%s=%q: use nats, kafka or rabbitmq", EnvBroker, b)
	}
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"TEMPORAL_ADDRESS="+tAddr,
		"TEMPORAL_NAMESPACE=default",
		"STRIPE_API_KEY=sk_test_devstack_simulator",
		"STRIPE_BASE_URL="+stripeURL,
		"SENDGRID_API_KEY=SG.devstack-simulator",
		"SENDGRID_BASE_URL="+sendgridURL,
		"EFFECTIVELY_HEALTH_ADDR="+healthAddr,
	)
	env = append(env, natsEnv...)
	apiEnv, apiAddr, apiToken, err := s.apiEnv()
	if err != nil {
		return err
	}
	env = append(env, apiEnv...)
	if err := s.startWorker(ctx, env, healthAddr); err != nil {
		return err
	}

	examples := filepath.Join(root, o.examples)
	step(out, "sending %s", o.examples)
	if err := s.starter(ctx, env, "send", examples); err != nil {
		return err
	}
	ids, err := messageIDs(examples)
	if err != nil {
		return err
	}
	if err := waitWorkflows(ctx, tAddr, ids); err != nil {
		return err
	}
	step(out, "sending %s again, after every workflow completed: all copies are duplicates", o.examples)
	if err := s.starter(ctx, env, "send", examples); err != nil {
		return err
	}
	if natsOn {
		step(out, "publishing %s to %s: the worker's consumer recognises every copy in the inbox", o.examples, via)
		if err := s.starter(ctx, env, append(publish, examples)...); err != nil {
			return err
		}
		time.Sleep(2 * time.Second) // let the consumer record them
	}
	if err := s.report(ctx, dbURL, ids, stripeSim, sendgridSim); err != nil {
		return err
	}

	step(out, "submitting a message over HTTP and waiting for its outcome (docs/intake.md#http)")
	if err := apiCurl(ctx, out, apiAddr, apiToken); err != nil {
		return err
	}

	if uiURL != "" {
		fmt.Fprintf(out, "\nTemporal UI:   %s\n", uiURL)
		fmt.Fprintf(out, "Find a message: %s/namespaces/default/workflows?query=%s\n", uiURL, url.QueryEscape(`MessageId="evt_91c2"`))
	} else {
		fmt.Fprintf(out, "\nTemporal:      the cluster's frontend on %s (no UI: run the Temporal UI against it)\n", tAddr)
	}
	fmt.Fprintf(out, "Try:           DATABASE_URL='%s' TEMPORAL_ADDRESS=%s %s status evt_91c2\n", dbURL, tAddr, filepath.Join(o.stateDir, "bin", "starter"))
	fmt.Fprintf(out, "Simulators:    %s/_sim/stats  %s/_sim/stats\n", stripeURL, sendgridURL)
	fmt.Fprintf(out, "Logs:          %s\n", filepath.Join(o.stateDir, "logs"))
	if o.exit {
		return nil
	}
	fmt.Fprintln(out, "\nThe worker and the UI keep running. Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintln(out, "\nstopping")
	return nil
}

// ensureTemporalCLI returns bin/temporal, building it with the Go toolchain
// when it is missing (no download: the module proxy serves the source).
func (s *stack) ensureTemporalCLI(ctx context.Context) (string, error) {
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p, nil
	}
	bin := filepath.Join(s.root, "bin", "temporal")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	step(s.out, "building the Temporal CLI %s into bin/ (about 2 minutes, once)", TemporalCLIVersion)
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/temporalio/cli/cmd/temporal@"+TemporalCLIVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Join(s.root, "bin"))
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build the Temporal CLI: %w", err)
	}
	return bin, nil
}

func (s *stack) goCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = s.out, s.out
	return cmd.Run()
}

// spawn starts a long-running child whose output goes to logs/name.log. The
// child is killed if devstack dies.
func (s *stack) spawn(name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(s.state, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	// Not CommandContext: children are stopped by close, SIGTERM first, so
	// they can shut down cleanly.
	cmd := exec.Command(bin, args...) //nolint:noctx // stopped by close with SIGTERM, see above
	cmd.Dir = s.root
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s.procs = append(s.procs, cmd)
	s.cleanups = append(s.cleanups, func() { logf.Close() })
	return cmd, nil
}

func (s *stack) startTemporal(ctx context.Context, bin string) (addr, uiURL string, err error) {
	addr, err = freeAddr("127.0.0.1:7233")
	if err != nil {
		return "", "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	uiAddr, err := freeAddr("127.0.0.1:8233")
	if err != nil {
		return "", "", err
	}
	_, uiPort, _ := net.SplitHostPort(uiAddr)
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", port, "--ui-port", uiPort,
		"--db-filename", filepath.Join(s.state, "temporal", "temporal.db"), "--sqlite-pragma", "journal_mode=wal",
		"--log-level", "warn",
		// One partition: with the default four, tasks wait in partitions
		// no poller is on, and p99 latency reaches seconds.
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
	}
	args = append(args, workflows.SearchAttributeFlags()...)
	step(s.out, "starting the Temporal dev server on %s (UI on %s)", addr, uiAddr)
	if _, err := s.spawn("temporal", os.Environ(), bin, args...); err != nil {
		return "", "", err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := client.Dial(client.Options{HostPort: addr, Logger: quietLogger{}})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return addr, "http://" + uiAddr, nil
			}
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("the Temporal dev server did not answer on %s within 60s (see %s)", addr, filepath.Join(s.state, "logs", "temporal.log"))
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// startCluster starts a Temporal server on the stack's Postgres
// (tools/cluster: its four services in separate processes, fresh databases
// unless -keep) and returns its frontend's address.
func (s *stack) startCluster(ctx context.Context, dbURL string, fresh bool) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	port, _ := strconv.Atoi(u.Port())
	step(s.out, "starting a Temporal server %s on Postgres at %s (four processes; EFFECTIVELY_TEMPORAL=cluster)", cluster.ServerVersion, u.Host)
	c, err := cluster.Start(ctx, cluster.Options{
		Bin: filepath.Join(s.root, "bin"), Dir: filepath.Join(s.state, "cluster"), Split: true, Fresh: fresh,
		PostgresHost: u.Hostname(), PostgresPort: port, Database: "temporal_" + s.instance,
	})
	if err != nil {
		return "", err
	}
	s.cleanups = append(s.cleanups, c.Stop)
	return c.Address(), nil
}

// serve runs h on addr, or on a free port when addr is taken.
func (s *stack) serve(ctx context.Context, name, addr string, h http.Handler) (string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		ln, err = lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.cleanups = append(s.cleanups, func() { _ = srv.Close() })
	u := "http://" + ln.Addr().String()
	step(s.out, "%s on %s", name, u)
	return u, nil
}

func (s *stack) startWorker(ctx context.Context, env []string, healthAddr string) error {
	step(s.out, "starting the worker (log: %s)", filepath.Join(s.state, "logs", "worker.log"))
	cmd, err := s.spawn("worker", env, filepath.Join(s.state, "bin", "worker"))
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.procs = s.procs[:len(s.procs)-1] // waited on here instead of in close
	s.cleanups = append(s.cleanups, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("the worker exited at start: see %s", filepath.Join(s.state, "logs", "worker.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := http.Get("http://" + healthAddr + "/healthz") //nolint:noctx // short local poll
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the worker did not become healthy within 60s")
		}
	}
}

func (s *stack) starter(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.state, "bin", "starter"), args...) //nolint:gosec // the starter devstack built
	cmd.Dir = s.root
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = s.out, s.out
	err := cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == 3 {
		return nil // some examples are invalid on purpose
	}
	return err
}

// messageIDs returns the IDs of the valid messages in a file.
func messageIDs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []string
	seen := map[string]bool{}
	err = route.Default().DecodeStream(f, func(_ int, _ []byte, m *message.Message, err error) error {
		if err == nil && !seen[m.ID] {
			seen[m.ID] = true
			ids = append(ids, m.ID)
		}
		return nil
	})
	return ids, err
}

// waitWorkflows waits until every message's workflow has closed.
func waitWorkflows(ctx context.Context, addr string, ids []string) error {
	c, err := client.Dial(client.Options{HostPort: addr, Logger: quietLogger{}})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, id := range ids {
		wfID, err := identity.WorkflowID(message.ConsumerOrderPlaced, id)
		if err != nil {
			return err
		}
		var st workflows.Status
		if err := c.GetWorkflow(ctx, wfID, "").Get(ctx, &st); err != nil {
			return fmt.Errorf("workflow %s: %w", wfID, err)
		}
	}
	return nil
}

func (s *stack) report(ctx context.Context, dbURL string, ids []string, st *stripesim.Server, sg *sendgridsim.Server) error {
	pool, err := store.Open(ctx, dbURL, store.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	db := store.New(pool)
	stripeStats, mailStats := st.Stats(), sg.Stats()
	fmt.Fprintln(s.out, "\nWhat happened (Postgres, and the simulators' counters):")
	tw := tabwriter.NewWriter(s.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE\tOUTCOME\tORDER\tORDER STATUS\tPAYMENT\tRECEIPT\tCHARGES\tEMAILS\tCOPIES SEEN")
	for _, id := range ids {
		ms, err := db.Status(ctx, message.ConsumerOrderPlaced, id)
		if err != nil {
			return err
		}
		outcome, order, orderStatus, pay, receipt, dups := "-", "-", "-", "-", "-", 0
		if ms.Processed != nil {
			outcome = string(ms.Processed.Outcome)
			if ms.Processed.OrderID != nil {
				order = fmt.Sprint(*ms.Processed.OrderID)
			}
		}
		if ms.Order != nil && ms.Payment != nil {
			orderStatus, receipt = string(ms.Order.Status), ms.Order.ReceiptStatus
		}
		if ms.Payment != nil {
			pay = string(ms.Payment.State)
			if ms.Payment.PaymentIntentID != "" {
				pay += " " + ms.Payment.PaymentIntentID
			}
			if ms.Payment.DeclineCode != "" {
				pay += " (" + ms.Payment.DeclineCode + ")"
			}
		}
		if ms.Inbox != nil {
			dups = ms.Inbox.Duplicates
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", id, outcome, order, orderStatus, pay, receipt,
			stripeStats.ChargesByMessage[id], mailStats.DeliveriesByKey[identity.MustKey(identity.EffectEmail, id)], 1+dups)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	q, err := db.QuarantineList(ctx, 10)
	if err != nil {
		return err
	}
	if len(q) > 0 {
		fmt.Fprintln(s.out, "\nQuarantined (kept with the reason, nothing started):")
		for _, e := range q {
			fmt.Fprintf(s.out, "  #%d %s: %s\n", e.ID, e.Reason, e.Detail)
		}
	}
	b, _ := json.Marshal(map[string]int{"charges": stripeStats.Charges, "emails": mailStats.Deliveries})
	fmt.Fprintf(s.out, "\nTotals at the providers: %s\n", strings.ReplaceAll(string(b), ",", ", "))
	return nil
}

// Devstack's own streams, so a run never consumes another deployment's.
// broker returns the worker's NATS settings: devstack's own streams on the
// JetStream server at 127.0.0.1:4222 when one answers, else NATS_URL=off
// (the worker then takes messages from the starter only).
func (s *stack) broker(ctx context.Context, fresh bool) ([]string, bool) {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		step(s.out, "no NATS at %s: broker intake off (the worker takes messages from the starter)", url)
		return []string{"NATS_URL=off"}, false
	}
	defer nc.Close()
	devStream := "EFFECTIVELY_" + strings.ToUpper(s.instance)
	devEventsStream := devStream + "_EVENTS"
	subjects := "effectively-" + s.instance
	if fresh {
		if js, err := jetstream.New(nc); err == nil {
			// The dead letters too: their advisories name sequences of the
			// stream deleted here, which a new stream reuses.
			for _, name := range []string{devStream, devEventsStream, intakejs.DeadLetterStream(devStream)} {
				_ = js.DeleteStream(ctx, name) // absent on a first run
			}
		}
	}
	step(s.out, "using NATS JetStream at %s, streams %s and %s", url, devStream, devEventsStream)
	return []string{
		"NATS_URL=" + url,
		"NATS_STREAM=" + devStream, "NATS_SUBJECT=" + subjects + ".messages.>", "NATS_CONSUMER=devstack",
		"NATS_EVENTS_STREAM=" + devEventsStream, "NATS_EVENTS_PREFIX=" + subjects + ".events",
	}, true
}

// freeAddr returns want when it can be bound, else a free port on 127.0.0.1.
func freeAddr(want string) (string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", want)
	if err != nil {
		ln, err = lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// quietLogger drops the SDK's logs: devstack prints its own progress.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
