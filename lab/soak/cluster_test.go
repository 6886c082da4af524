package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/cluster"
	"github.com/effectively/effectively/tools/pgserver"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
)

var (
	clusterMessages = flag.Int("cluster-messages", 300, "messages of the soak on the cluster, duplicates included")
	clusterPace     = flag.Duration("cluster-pace", 400*time.Millisecond, "pause before each of the soak on the cluster's 4 concurrent sends")
)

// startCluster starts a fresh cluster of the server built in bin/ with o
// (its namespace kept 24 h) and a client of its namespace, both stopped at
// the test's end.
func startCluster(t *testing.T, o cluster.Options) (*cluster.Cluster, client.Client) {
	t.Helper()
	o.Bin, o.Dir, o.Fresh, o.Retention = filepath.Join(testenv.RepoRoot(), "bin"), t.TempDir(), true, 24*time.Hour
	c, err := cluster.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	tc, err := client.Dial(client.Options{HostPort: c.Address(), Namespace: o.Namespace, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return c, tc
}

// TestSoakOnCluster is the soak against the production path: a Temporal
// server v1.29.1 on Postgres with its four services in separate processes,
// and effectively's database on the same Postgres, a private server this
// test can restart. While the messages flow, the history service is killed
// with SIGKILL and started again, then matching, then the frontend; then
// Postgres restarts under both Temporal and effectively; meanwhile workers
// are killed and replaced as a rolling deploy does. Expect what the dev
// server soak expects: no double charge, no lost message, every workflow
// closed.
//
//	go test ./lab/soak/ -run TestSoakOnCluster -v -args -cluster-messages 2000
func TestSoakOnCluster(t *testing.T) {
	ctx := context.Background()
	// Postgres runs as the postgres user: its directory must not be under
	// t.TempDir, which only root may enter.
	pgDir, err := os.MkdirTemp("", "soak-cluster-pg-") //nolint:usetesting // t.TempDir's parent is closed to the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pgDir) })
	if err := os.Chmod(pgDir, 0o755); err != nil { //nolint:gosec // the postgres user must enter it; it holds nothing else
		t.Fatal(err)
	}
	pg, err := pgserver.Start(ctx, filepath.Join(pgDir, "data"), 0)
	if err != nil {
		t.Fatalf("a private Postgres is required (PostgreSQL's server binaries): %v", err)
	}
	t.Cleanup(func() { _ = pg.Stop(context.Background()) })
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE effectively"); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close(ctx)

	const namespace = "soak"
	c, tc := startCluster(t, cluster.Options{Split: true, PostgresPort: pg.Port(), Namespace: namespace})
	dbURL := pg.URL("effectively")
	pool, err := store.Open(ctx, dbURL, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	bin, err := workerproc.Build(ctx, testenv.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sims := testenv.StartSims(t)
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	subject, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	wcfg := workerproc.Config{
		DatabaseURL: dbURL, TemporalAddress: c.Address(), TaskQueue: "effectively-soak-cluster",
		StripeURL: sims.StripeURL, SendGridURL: sims.SendGridURL, NATSURL: testenv.NATSURL(),
		Extra: []string{
			"LOG_LEVEL=info", "TEMPORAL_NAMESPACE=" + namespace,
			"NATS_STREAM=" + j.Stream, "NATS_SUBJECT=" + j.Subject, "NATS_CONSUMER=soak",
			"NATS_ACK_WAIT=5s", "NATS_BACKOFF=none", "NATS_MAX_DELIVER=20",
			"NATS_EVENTS_STREAM=" + j.EventsStream, "NATS_EVENTS_PREFIX=" + j.EventsPrefix,
		},
	}
	// The namespace is fresh: `worker setup` registers the search
	// attributes the workflows start with, as a deployment would.
	setup := exec.CommandContext(ctx, bin, "setup")
	setup.Env = workerproc.Env(wcfg)
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("worker setup on the cluster: %v\n%s", err, out)
	}

	killAndRestart := func(service string) Outage {
		return Outage{Name: service + " SIGKILL", Do: func(context.Context) error {
			if err := c.Kill(service); err != nil {
				return err
			}
			time.Sleep(2 * time.Second)
			return c.Restart(service)
		}}
	}
	st := Stack{
		Temporal: tc, Pool: pool, Stripe: sims.Stripe, SendGrid: sims.SendGrid, WorkerBin: bin, Worker: wcfg,
		// Paced, so that the sending phase outlasts the outages and each
		// one hits workflows in flight.
		Send: func(ctx context.Context, raw []byte) error {
			time.Sleep(*clusterPace)
			_, err := j.JS.Publish(ctx, subject, raw)
			return err
		},
	}
	rep, err := Run(ctx, Config{
		Messages: *clusterMessages, Workers: 2, Kills: 1, Restarts: 1, Seed: *seed, Concurrency: 4,
		Timeout: 10 * time.Minute, Settle: 2 * time.Minute, Logf: t.Logf, Webhooks: true,
		Outages: []Outage{
			killAndRestart("history"), killAndRestart("matching"), killAndRestart("frontend"),
			{Name: "Postgres restart", Do: func(ctx context.Context) error {
				err := pg.Restart(ctx)
				pool.Reset() // the soak's own reads: its idle connections died with the server
				return err
			}},
		},
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "soak on the cluster report:\n%s", rep)
	if len(rep.Violations) > 0 {
		t.Errorf("the soak on the cluster found %d violations:\n%s", len(rep.Violations), strings.Join(rep.Violations, "\n"))
	}
	if len(rep.Outages) != 4 || rep.Kills < 1 || rep.Restarts < 1 {
		t.Errorf("the chaos did not happen: outages %v, %d kills, %d restarts", rep.Outages, rep.Kills, rep.Restarts)
	}
}
