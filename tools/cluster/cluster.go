// Package cluster runs a Temporal server with real persistence: the
// server built from source at the version inside the pinned CLI
// (ServerVersion), on Postgres, with SQL visibility, as one process or as
// its four services (history, matching, frontend, worker) in separate
// processes that a test can kill and restart one by one. It creates the
// persistence and visibility databases, applies the server's own schemas
// with its SQL tool, and registers the namespace with the configured
// retention. Search attributes are left to `worker setup`.
//
// `make cluster` runs it in the foreground (cmd/cluster); `make run` uses it
// when EFFECTIVELY_TEMPORAL=cluster.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ServerVersion is the Temporal server the cluster runs: the one inside the
// pinned CLI (v1.5.1), so tests on the dev server and on the cluster run
// the same server code.
const ServerVersion = "v1.29.1"

// Defaults a cluster runs with; docker-compose.yml's Temporal service uses
// the same (lab/deploy's compose test checks it).
const (
	DefaultShards    = 4
	DefaultRetention = 24 * time.Hour
	// SQLPlugin is the persistence plugin: Postgres 12 and later.
	SQLPlugin = "postgres12"
)

// Options configure a cluster. Zero values take the defaults noted.
type Options struct {
	// Bin is the directory holding temporal-server, temporal-sql and
	// temporal-schema/ (make bin/temporal-server). Default: bin/ of the repository.
	Bin string
	// Dir holds the configuration and the logs. Required.
	Dir string
	// PostgresHost, PostgresPort and PostgresUser reach the server the
	// databases are created on. Default 127.0.0.1:5432, user postgres
	// (trust authentication).
	PostgresHost string
	PostgresPort int
	PostgresUser string
	// Database names the persistence database; visibility goes to
	// Database+"_visibility". Default "temporal".
	Database string
	// Fresh drops both databases first.
	Fresh bool
	// Split runs each service in its own process (Kill and Restart need it);
	// otherwise one process runs all four.
	Split bool
	// Shards is numHistoryShards, fixed for the cluster's life. Default 4.
	Shards int
	// Namespace is registered with Retention. Default "default", 24h.
	Namespace string
	Retention time.Duration
	// Logs receives every process's output. Default: a file per process in Dir.
	Logs io.Writer
	// TLS makes the frontend require mutual TLS, as Temporal Cloud does.
	TLS *TLS
	// MaxConns bounds each process's pool to the persistence database;
	// visibility gets a quarter of it. Default 10: four processes then
	// hold at most 50 connections, half of a default max_connections.
	MaxConns int
}

// TLS names the PEM files of a frontend that requires mutual TLS: a CA,
// the frontend's certificate for localhost and 127.0.0.1, and a client
// certificate (the server's own worker service connects with it).
type TLS struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// clientTLS is the TLS configuration of a client of the frontend.
func (t *TLS) clientTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", t.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}, nil
}

func (o *Options) setDefaults() error {
	if o.Dir == "" {
		return errors.New("cluster: Dir is required")
	}
	if o.Bin == "" {
		o.Bin = filepath.Join(repoRoot(), "bin")
	}
	if o.PostgresHost == "" {
		o.PostgresHost = "127.0.0.1"
	}
	if o.PostgresPort == 0 {
		o.PostgresPort = 5432
	}
	if o.PostgresUser == "" {
		o.PostgresUser = "postgres"
	}
	if o.Database == "" {
		o.Database = "temporal"
	}
	if o.Shards == 0 {
		o.Shards = DefaultShards
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.MaxConns == 0 {
		o.MaxConns = 10
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	return nil
}

// Cluster is a running Temporal server.
type Cluster struct {
	opts    Options
	data    configData
	mu      sync.Mutex
	procs   map[string]*exec.Cmd
	done    map[string]chan struct{}
	metrics map[string]string
}

// Start builds the databases and the schemas, starts the server and
// registers the namespace; it returns once the frontend answers and the
// namespace is usable.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	for _, b := range []string{"temporal-server", "temporal-sql"} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return nil, fmt.Errorf("cluster: %s not found in %s: run `make bin/temporal-server` (builds go.temporal.io/server %s, about 4 minutes once)", b, o.Bin, ServerVersion)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, procs: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}, metrics: map[string]string{}}
	if err := c.databases(ctx); err != nil {
		return nil, err
	}
	groups := [][]string{serviceNames}
	if o.Split {
		groups = nil
		for _, s := range serviceNames {
			groups = append(groups, []string{s})
		}
	}
	// Every port at once, a metrics port per process included: ports
	// taken one by one could pick one already given to a service that has
	// not bound it yet.
	ports, err := freePorts(9 + len(groups))
	if err != nil {
		return nil, err
	}
	c.data = configData{
		Host: o.PostgresHost, Port: o.PostgresPort, User: o.PostgresUser,
		Database: o.Database, Visibility: o.Database + "_visibility", Shards: o.Shards,
		DynamicConfig: filepath.Join(o.Dir, "dynamicconfig.yaml"),
		FrontendGRPC:  ports[0], FrontendHTTP: ports[1], FrontendMember: ports[2],
		HistoryGRPC: ports[3], HistoryMember: ports[4], MatchingGRPC: ports[5], MatchingMember: ports[6],
		WorkerGRPC: ports[7], WorkerMember: ports[8], MaxConns: o.MaxConns, VisibilityConns: max(1, o.MaxConns/4), TLS: o.TLS,
	}
	if err := os.WriteFile(c.data.DynamicConfig, []byte(dynamicConfig), 0o600); err != nil {
		return nil, err
	}
	for i, g := range groups {
		if err := c.configure(g, ports[9+i]); err != nil {
			c.Stop()
			return nil, err
		}
		if err := c.startProcess(g); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.namespace(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Address is the frontend's gRPC address.
func (c *Cluster) Address() string { return fmt.Sprintf("127.0.0.1:%d", c.data.FrontendGRPC) }

// Database is the persistence database's name; visibility's is
// Database()+"_visibility".
func (c *Cluster) Database() string { return c.opts.Database }

// Namespace is the registered namespace.
func (c *Cluster) Namespace() string { return c.opts.Namespace }

// Metrics returns each process's Prometheus address, by its name (a
// service's name, or "server" for the one process).
func (c *Cluster) Metrics() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.metrics))
	for k, v := range c.metrics {
		out[k] = v
	}
	return out
}

// Pids returns each running process's pid by name.
func (c *Cluster) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, p := range c.procs {
		out[k] = p.Process.Pid
	}
	return out
}

// Kill sends SIGKILL to a service's process (Split only) and waits for it
// to exit.
func (c *Cluster) Kill(service string) error {
	c.mu.Lock()
	p, ok := c.procs[service]
	done := c.done[service]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("cluster: no process runs %q (services run in separate processes only with Split)", service)
	}
	_ = p.Process.Signal(syscall.SIGKILL)
	<-done
	return nil
}

// Restart starts a killed service's process again, on the same ports.
func (c *Cluster) Restart(service string) error {
	return c.startProcess([]string{service})
}

// Stop ends every process (SIGTERM, then SIGKILL after 10 s).
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := make(map[string]*exec.Cmd, len(c.procs))
	for k, v := range c.procs {
		procs[k] = v
	}
	c.mu.Unlock()
	for name, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done[name]:
		case <-time.After(10 * time.Second):
			_ = p.Process.Signal(syscall.SIGKILL)
			<-c.done[name]
		}
	}
}

// name is the process name of a group of services.
func name(group []string) string {
	if len(group) == 1 {
		return group[0]
	}
	return "server"
}

// configure writes the configuration directory of a process, whose
// Prometheus endpoint listens on metricsPort.
func (c *Cluster) configure(group []string, metricsPort int) error {
	d := c.data
	d.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	b, err := renderConfig(d)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.opts.Dir, "config-"+name(group))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	c.mu.Lock()
	c.metrics[name(group)] = d.MetricsAddr
	c.mu.Unlock()
	return os.WriteFile(filepath.Join(dir, "development.yaml"), b, 0o600)
}

// startProcess starts the process of group and waits until its gRPC ports
// accept connections.
func (c *Cluster) startProcess(group []string) error {
	n := name(group)
	args := []string{"--root", c.opts.Dir, "--config", "config-" + n, "--env", "development", "--allow-no-auth", "start"}
	for _, s := range group {
		args = append(args, "--service", s)
	}
	// The process outlives the call that starts it: Stop and Kill end it.
	cmd := exec.CommandContext(context.Background(), filepath.Join(c.opts.Bin, "temporal-server"), args...) //nolint:gosec // the server binary built by make
	out := c.opts.Logs
	if out == nil {
		f, err := os.OpenFile(filepath.Join(c.opts.Dir, n+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", n, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.procs[n], c.done[n] = cmd, done
	c.mu.Unlock()
	ports := map[string]int{"frontend": c.data.FrontendGRPC, "history": c.data.HistoryGRPC, "matching": c.data.MatchingGRPC, "worker": c.data.WorkerMember} // the worker service serves no gRPC: its membership port
	deadline := time.Now().Add(90 * time.Second)
	for _, s := range group {
		for {
			d := net.Dialer{Timeout: time.Second}
			conn, err := d.DialContext(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", ports[s]))
			if err == nil {
				_ = conn.Close()
				break
			}
			select {
			case <-done:
				log := filepath.Join(c.opts.Dir, n+".log")
				return fmt.Errorf("cluster: %s exited at start: %s (see %s)", n, lastError(log), log)
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster: %s (%s) did not listen within 90 s; see %s", n, s, filepath.Join(c.opts.Dir, n+".log"))
			}
		}
	}
	return nil
}

// databases creates the two databases (dropping them first when Fresh)
// and brings their schemas to the server's version with its SQL tool.
func (c *Cluster) databases(ctx context.Context) error {
	o := c.opts
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=disable", o.PostgresUser, o.PostgresHost, o.PostgresPort))
	if err != nil {
		return fmt.Errorf("cluster: connect to Postgres: %w", err)
	}
	defer admin.Close(ctx)
	schema := filepath.Join(o.Bin, "temporal-schema")
	for db, dir := range map[string]string{o.Database: "temporal", o.Database + "_visibility": "visibility"} {
		ident := pgx.Identifier{db}.Sanitize()
		if o.Fresh {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
				return fmt.Errorf("cluster: drop %s: %w", db, err)
			}
		}
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
				return fmt.Errorf("cluster: create %s: %w", db, err)
			}
		}
		base := []string{"--plugin", SQLPlugin, "--ep", o.PostgresHost, "-p", strconv.Itoa(o.PostgresPort), "-u", o.PostgresUser, "--db", db}
		if !exists {
			if err := c.sql(ctx, append(base, "setup-schema", "-v", "0.0")...); err != nil {
				return err
			}
		}
		if err := c.sql(ctx, append(base, "update-schema", "-d", filepath.Join(schema, dir, "versioned"))...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) sql(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(c.opts.Bin, "temporal-sql"), args...).CombinedOutput() //nolint:gosec // the schema tool built by make
	if err != nil {
		return fmt.Errorf("cluster: temporal-sql %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// namespace registers the namespace (an existing one is kept) and waits
// until the frontend serves it.
func (c *Cluster) namespace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var tc client.Client
	opts := client.Options{HostPort: c.Address(), Namespace: c.opts.Namespace, Logger: quiet{}}
	if c.opts.TLS != nil {
		t, err := c.opts.TLS.clientTLS()
		if err != nil {
			return fmt.Errorf("cluster: client TLS: %w", err)
		}
		opts.ConnectionOptions.TLS = t
	}
	var err error
	for {
		tc, err = client.DialContext(ctx, opts)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: the frontend did not answer: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	defer tc.Close()
	for {
		_, err = tc.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: c.opts.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(c.opts.Retention),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: register namespace %s: %w", c.opts.Namespace, err)
		case <-time.After(time.Second):
		}
	}
	// The frontend's namespace cache refreshes on its own schedule: wait
	// until a read in the namespace succeeds.
	for {
		_, err = tc.WorkflowService().ListOpenWorkflowExecutions(ctx, &workflowservice.ListOpenWorkflowExecutionsRequest{Namespace: c.opts.Namespace, MaximumPageSize: 1})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: namespace %s not served: %w", c.opts.Namespace, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quiet drops the SDK client's logs.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

// freePorts returns n ports free on 127.0.0.1 right now, below 32768: the
// server keeps membership ports in a smallint column, and an ephemeral port
// (above 32767) makes a service exit at start ("out of range for type
// smallint").
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	// Processes started side by side (parallel test packages) begin at
	// different places.
	start := 20000 + (os.Getpid()*7919+int(time.Now().UnixNano()/1e6))%12000
	for p := start; len(ports) < n; p++ {
		if p >= 32768 {
			p = 20000
		}
		if p == start-1 {
			return nil, errors.New("cluster: no free ports between 20000 and 32767")
		}
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

// repoRoot is the repository root: the nearest parent with a go.mod naming
// the product's module, else the working directory.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/effectively/effectively\n") {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// lastError returns the last "error" field of a server log, for a start
// failure to say why.
func lastError(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	found := "no error logged"
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, `"error":"`); i >= 0 {
			rest := line[i+len(`"error":"`):]
			if j := strings.Index(rest, `"`); j >= 0 {
				found = rest[:min(j, 300)]
			}
		}
	}
	return found
}
