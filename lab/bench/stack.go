package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/freeport"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

// stack is every real component of one run. close undoes what was started,
// in reverse order, each step bounded.
type stack struct {
	temporal     client.Client // the dev server's client (or a dialled one)
	temporalAddr string
	devServer    *testsuite.DevServer
	devServerPID int
	// cpus is the run's CPU layout, nil for CPUsShared.
	cpus *cpuLayout
	// metricsURL is the dev server's Prometheus endpoint (its
	// --metrics-port), where the action counter is read; empty when the
	// server was not started here and Config.TemporalMetricsURL is unset.
	metricsURL string

	dbURL  string
	dbName string
	// proxy counts the transactions of every connection that goes through
	// it: the workers' and the reference points' (proxyURL), not the
	// harness's own. xactBase is xact_commit of the run's database before
	// any of them connected.
	proxy    *pgProxy
	proxyURL string
	xactBase float64
	// pool is the harness's own: the completion poller and the probes; it
	// goes through a proxy of its own (harnessProxy), so its commits are
	// not counted with the workers' but are known for the cross-check.
	// work is the reference points' pool (the naive layout's records, the
	// plain consumer), whose commits are their work.
	pool         *pgxpool.Pool
	work         *pgxpool.Pool
	harnessProxy *pgProxy
	// admin is a connection to the maintenance database, where
	// pg_stat_database is read without adding to the run's database.
	admin *pgxpool.Pool

	pprofAddr string // the worker's EFFECTIVELY_PPROF_ADDR
	// workerMetrics is the first worker's Prometheus endpoint (its
	// EFFECTIVELY_HEALTH_ADDR), which the duplicate burst polls.
	workerMetrics string
	// compression is the gRPC compression of every client of the run,
	// the worker's and the reference points' alike.
	compression string
	// perfEvent is the perf event that counts instructions here, "" when
	// none does (probePerf).
	perfEvent string

	// broker is the run's broker (Config.Broker) and its stream, topic
	// or queue.
	broker Broker

	stripe      *stripesim.Server
	sendgrid    *sendgridsim.Server
	stripeURL   string
	sendgridURL string

	worker    *workerproc.Proc
	workerBin string
	taskQueue string
	// extra are the worker processes beside worker during the scale-out;
	// workerEnv builds a worker's environment for its pprof address.
	extra     []*workerproc.Proc
	extraLogs string
	workerEnv func(pprofAddr string, extra ...string) []string
	// apiURL and apiToken reach the first worker's HTTP intake.
	apiURL, apiToken string

	cleanups []func()
}

func (s *stack) onClose(f func()) { s.cleanups = append(s.cleanups, f) }

func (s *stack) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

func randomTag(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// temporalCLI finds the Temporal CLI: cfg, $TEMPORAL_CLI, bin/temporal in
// the repository, temporal on PATH.
func temporalCLI(cfg Config) (string, error) {
	if cfg.TemporalCLI != "" {
		return cfg.TemporalCLI, nil
	}
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p, nil
	}
	if p := filepath.Join(cfg.RepoRoot, "bin", "temporal"); fileExists(p) {
		return p, nil
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", errors.New("the Temporal CLI is required: build it with `make bin/temporal` or set TEMPORAL_CLI")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startStack brings up everything the run needs. On error, what was started
// is stopped before it returns.
func startStack(ctx context.Context, cfg Config) (_ *stack, err error) {
	s := &stack{taskQueue: "effectively-bench-" + randomTag(4), compression: cfg.GrpcCompression}
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	// Temporal.
	if cfg.TemporalAddress != "" {
		c, err := client.Dial(client.Options{HostPort: cfg.TemporalAddress, Logger: quietLogger()})
		if err != nil {
			return nil, fmt.Errorf("dial Temporal at %s: %w", cfg.TemporalAddress, err)
		}
		s.onClose(c.Close)
		s.temporal, s.temporalAddr = c, cfg.TemporalAddress
	} else {
		cli, err := temporalCLI(cfg)
		if err != nil {
			return nil, err
		}
		metricsAddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, metricsPort, _ := net.SplitHostPort(metricsAddr)
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		srv, err := testsuite.StartDevServer(sctx, testsuite.DevServerOptions{
			ExistingPath:     cli,
			LogLevel:         "error",
			SearchAttributes: workflows.SearchAttributes("x", "x", 0),
			ClientOptions:    &client.Options{Logger: quietLogger()},
			ExtraArgs: []string{
				"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
				"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
				"--dynamic-config-value", "system.enableEagerWorkflowStart=true",
				// Its Prometheus endpoint, for the action counter.
				"--metrics-port", metricsPort,
			},
			Stdout: io.Discard,
			Stderr: io.Discard,
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("start the Temporal dev server (%s): %w", cli, err)
		}
		s.onClose(func() { _ = srv.Stop() })
		s.devServer, s.temporal, s.temporalAddr = srv, srv.Client(), srv.FrontendHostPort()
		s.devServerPID = childPID(os.Getpid(), "temporal")
		host, _, _ := net.SplitHostPort(srv.FrontendHostPort())
		s.metricsURL = "http://" + net.JoinHostPort(host, metricsPort) + "/metrics"
		if cfg.TemporalCPUs == CPUsOwn {
			// Before anything else starts: the workers inherit the
			// harness's CPUs, Postgres's backends the postmaster's.
			if s.cpus, err = newCPULayout(); err != nil {
				return nil, err
			}
			s.onClose(s.cpus.undo)
			if err := s.cpus.apply(s.devServerPID); err != nil {
				return nil, err
			}
		}
	}
	if cfg.TemporalMetricsURL != "" {
		s.metricsURL = cfg.TemporalMetricsURL
	}
	if s.metricsURL != "" {
		if _, err := s.scrapeActions(ctx); err != nil {
			return nil, fmt.Errorf("read the Temporal server's metrics at %s: %w", s.metricsURL, err)
		}
	}

	// Postgres: a fresh, migrated database, dropped at the end.
	if s.dbURL, s.dbName, err = newDatabase(ctx, cfg.PostgresURL, s); err != nil {
		return nil, err
	}
	if s.admin, err = store.Open(ctx, cfg.PostgresURL, store.PoolConfig{MaxConns: 1}); err != nil {
		return nil, err
	}
	s.onClose(s.admin.Close)
	// The migrations' connections have closed, and a backend publishes its
	// counts as it exits: wait for that, then take the baseline.
	if err := sleepCtx(ctx, time.Second); err != nil {
		return nil, err
	}
	if s.xactBase, _, err = s.xactCommit(ctx); err != nil {
		return nil, err
	}
	pu, err := url.Parse(s.dbURL)
	if err != nil {
		return nil, errors.New("malformed database URL")
	}
	if s.proxy, err = startPGProxy(pu.Host); err != nil {
		return nil, err
	}
	s.onClose(s.proxy.close)
	if s.proxyURL, err = s.proxy.url(s.dbURL); err != nil {
		return nil, err
	}
	if s.work, err = store.Open(ctx, s.proxyURL, store.PoolConfig{MaxConns: int32(max(16, cfg.PlainClients+4))}); err != nil { //nolint:gosec // small config value
		return nil, err
	}
	s.onClose(s.work.Close)
	if s.harnessProxy, err = startPGProxy(pu.Host); err != nil {
		return nil, err
	}
	s.onClose(s.harnessProxy.close)
	harnessURL, err := s.harnessProxy.url(s.dbURL)
	if err != nil {
		return nil, err
	}
	if s.pool, err = store.Open(ctx, harnessURL, store.PoolConfig{MaxConns: 4}); err != nil {
		return nil, err
	}
	s.onClose(s.pool.Close)

	// The broker: a stream, topic or queue of the run's own, removed at
	// the end.
	if s.broker, err = newBroker(ctx, cfg); err != nil {
		return nil, err
	}
	s.onClose(s.broker.Close)

	// The provider simulators, in this process, with their latency.
	s.stripe = stripesim.New(stripesim.Options{Latency: cfg.Latency})
	s.sendgrid = sendgridsim.New(sendgridsim.Options{Latency: cfg.Latency})
	st, sg := httptest.NewServer(s.stripe), httptest.NewServer(s.sendgrid)
	s.onClose(st.Close)
	s.onClose(sg.Close)
	s.stripeURL, s.sendgridURL = st.URL, sg.URL

	// One real worker process, with its profiles and its metrics on free
	// loopback ports, chosen together so that they cannot be one port.
	ports, err := freeport.Pick(2)
	if err != nil {
		return nil, err
	}
	s.pprofAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	healthAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	s.workerMetrics = "http://" + healthAddr + "/metrics"
	s.workerBin = cfg.WorkerBin
	if s.workerBin == "" {
		dir, err := os.MkdirTemp("", "effectively-bench-")
		if err != nil {
			return nil, err
		}
		s.onClose(func() { _ = os.RemoveAll(dir) })
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		s.workerBin, err = workerproc.Build(bctx, cfg.RepoRoot, dir)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	s.workerEnv = func(pprofAddr string, extra ...string) []string {
		return workerproc.Env(workerproc.Config{
			DatabaseURL: s.proxyURL, TemporalAddress: s.temporalAddr, TaskQueue: s.taskQueue,
			StripeURL: s.stripeURL, SendGridURL: s.sendgridURL, NATSURL: s.broker.NATSURL(),
			Extra: append([]string{
				"LOG_LEVEL=warn",
				// The worker's default pool, not workerproc's small one.
				"DATABASE_MAX_CONNS=32",
				// The worker's defaults, not workerproc's short test timeouts:
				// nothing is killed here.
				"PAYMENT_START_TO_CLOSE=2m", "EMAIL_START_TO_CLOSE=1m",
				// The pruning schedule fires on the hour by default; its
				// workflow's actions would land in whichever phase spans it.
				"PRUNE_EVERY=8760h",
				// The simulators here have no rate limits and the run measures
				// the worker's own cost: the providers' limits are off (the
				// drain phase, drain.go, measures them).
				"STRIPE_RATE_LIMIT=0", "STRIPE_ENDPOINT_RATE_LIMIT=0",
				"EFFECTIVELY_PPROF_ADDR=" + pprofAddr,
				temporalclient.EnvCompression + "=" + cfg.GrpcCompression,
			}, append(append(s.broker.WorkerEnv(), extra...), cfg.WorkerEnv...)...),
		})
	}
	tokDir, err := os.MkdirTemp("", "effectively-bench-api-")
	if err != nil {
		return nil, err
	}
	s.onClose(func() { _ = os.RemoveAll(tokDir) })
	apiEnv, err := s.apiEnv(tokDir)
	if err != nil {
		return nil, err
	}
	if s.worker, err = workerproc.Start(s.workerBin, s.workerEnv(s.pprofAddr, append(apiEnv, "EFFECTIVELY_HEALTH_ADDR="+healthAddr)...)); err != nil {
		return nil, err
	}
	s.onClose(func() { s.worker.Stop(15 * time.Second) })
	if err := s.waitWorkerReady(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	return s, nil
}

// extraWorkerConns is the pool size (DATABASE_MAX_CONNS) of each worker
// process the scale-out adds; the first keeps the default (32).
const extraWorkerConns = 16

// workerPIDs lists the worker processes running now.
func (s *stack) workerPIDs() []int {
	pids := []int{s.worker.Pid()}
	for _, p := range s.extra {
		pids = append(pids, p.Pid())
	}
	return pids
}

// sample reads the CPU time of the run's processes.
func (s *stack) sample() usage { return sampleUsage(s.workerPIDs(), s.devServerPID) }

// setWorkers starts or stops extra worker processes (same binary, task
// queue, durable consumer and database as the first) until n run, and
// waits until each new one polls the task queue.
func (s *stack) setWorkers(ctx context.Context, n int) error {
	for len(s.extra) > max(0, n-1) {
		p := s.extra[len(s.extra)-1]
		p.Stop(15 * time.Second)
		s.extraLogs += p.Logs()
		s.extra = s.extra[:len(s.extra)-1]
	}
	for len(s.extra) < n-1 {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		// Postgres here allows 100 connections, shared with whatever
		// else runs: an extra worker's pool is half the default's.
		p, err := workerproc.Start(s.workerBin, s.workerEnv(addr, "DATABASE_MAX_CONNS="+strconv.Itoa(extraWorkerConns)))
		if err != nil {
			return err
		}
		s.extra = append(s.extra, p)
		s.onClose(func() { p.Stop(15 * time.Second) })
		if err := s.waitPolling(ctx, p, 90*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitPolling waits until the process p polls the task queue: the SDK's
// default identity starts with the process ID.
func (s *stack) waitPolling(ctx context.Context, p *workerproc.Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	prefix := fmt.Sprintf("%d@", p.Pid())
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("an extra worker exited during start: %w\n%s", p.Err(), tail(p.Logs(), 4000))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := s.temporal.WorkflowService().DescribeTaskQueue(cctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace:     "default",
			TaskQueue:     &taskqueuepb.TaskQueue{Name: s.taskQueue, Kind: enums.TASK_QUEUE_KIND_NORMAL},
			TaskQueueType: enums.TASK_QUEUE_TYPE_WORKFLOW,
		})
		cancel()
		if err == nil {
			for _, pl := range resp.GetPollers() {
				if strings.HasPrefix(pl.GetIdentity(), prefix) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("an extra worker was not polling after %s:\n%s", timeout, tail(p.Logs(), 4000))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitWorkerReady waits until the worker polls its task queue and its
// durable consumer exists, or the process exits, or timeout passes.
func (s *stack) waitWorkerReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.worker.Done():
			return fmt.Errorf("the worker exited during start: %w\n%s", s.worker.Err(), tail(s.worker.Logs(), 4000))
		default:
		}
		if s.workerPolling(ctx) && s.broker.Subscribed(ctx) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the worker was not ready after %s:\n%s", timeout, tail(s.worker.Logs(), 4000))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *stack) workerPolling(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.temporal.WorkflowService().DescribeTaskQueue(cctx, &workflowservice.DescribeTaskQueueRequest{
		Namespace:     "default",
		TaskQueue:     &taskqueuepb.TaskQueue{Name: s.taskQueue, Kind: enums.TASK_QUEUE_KIND_NORMAL},
		TaskQueueType: enums.TASK_QUEUE_TYPE_WORKFLOW,
	})
	return err == nil && len(resp.GetPollers()) > 0
}

// newDatabase creates an empty, migrated database on the server of admin,
// registers its drop with s and returns its URL and name.
func newDatabase(ctx context.Context, admin string, s *stack) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", "", fmt.Errorf("postgres is required at %s: %w", redactURL(admin), err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	name := "effectively_bench_" + randomTag(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	s.onClose(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(dctx, admin)
		if err != nil {
			return
		}
		defer func() { _ = c.Close(dctx) }()
		_, _ = c.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	dbURL, err := store.WithDatabase(admin, name)
	if err != nil {
		return "", "", err
	}
	pool, err := store.Open(ctx, dbURL, store.PoolConfig{MaxConns: 2})
	if err != nil {
		return "", "", err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, nil); err != nil {
		return "", "", err
	}
	if _, err := pool.Exec(ctx, benchSchema); err != nil {
		return "", "", fmt.Errorf("create the bench tables: %w", err)
	}
	return dbURL, name, nil
}

// benchSchema holds what the naive layout records: the worker's own tables
// are left to the worker's code.
const benchSchema = `
CREATE TABLE bench_naive (
    message_id  text        PRIMARY KEY,
    payment_ref text,
    receipt_ref text,
    charged_at  timestamptz,
    receipt_at  timestamptz
)`

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ports, err := freeport.Pick(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

type profile struct {
	data []byte
	err  error
}

// profileWorker takes a CPU profile of the worker for seconds, in the
// background; the channel yields it (or why there is none) when it ends.
func (s *stack) profileWorker(ctx context.Context, seconds int) <-chan profile {
	out := make(chan profile, 1)
	if seconds <= 0 {
		out <- profile{err: errors.New("not taken (-profile 0)")}
		return out
	}
	go func() {
		pctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+30)*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(pctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.pprofAddr, seconds), nil)
		if err != nil {
			out <- profile{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- profile{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("worker pprof answered %s: %s", resp.Status, data)
		}
		out <- profile{data: data, err: err}
	}()
	return out
}

// clientOptions are the options of the reference points' clients: the
// dev server, no logs, and the run's gRPC compression.
func (s *stack) clientOptions() client.Options {
	o := client.Options{HostPort: s.temporalAddr, Logger: quietLogger()}
	// The worker's own choice (temporalclient.Compression), so that both
	// sides of a ratio speak the same encoding; Run refuses a value it
	// does not know.
	o.ConnectionOptions.GrpcCompression, _ = temporalclient.Compression(s.compression, s.temporalAddr)
	return o
}
