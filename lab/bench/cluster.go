package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/effectively/effectively/tools/cluster"
)

// ClusterPhase is the e2e path on the production path: a Temporal server
// on Postgres (tools/cluster), its four services in separate processes,
// with effectively's database on the same Postgres server.
type ClusterPhase struct {
	Result Result `json:"result"`
	// Shards is the server's numHistoryShards.
	Shards int `json:"shards"`
	// CPUms is the CPU per unique message, in milliseconds, by component:
	// the server's four services, the Postgres backends serving Temporal's
	// two databases and effectively's, the effectively worker, NATS.
	CPUms map[string]float64 `json:"cpu_ms_per_message"`
	// TemporalCommits is the transactions Temporal's persistence and
	// visibility databases committed per unique message over the phase
	// (its background work included); EffectivelyCommits the workers'.
	TemporalCommits float64 `json:"temporal_commits_per_message"`
	// TemporalIdleCommitsPerSecond is its rate while idle, measured right
	// before; TemporalNetCommits is TemporalCommits less that rate over the
	// phase: a message's own share.
	TemporalIdleCommitsPerSecond float64 `json:"temporal_idle_commits_per_second"`
	TemporalNetCommits           float64 `json:"temporal_net_commits_per_message"`
	EffectivelyCommits           float64 `json:"effectively_commits_per_message"`
}

// clusterComponents are CPUms's keys, in the order the report shows them.
var clusterComponents = []string{"frontend", "history", "matching", "worker (Temporal)", "Postgres for Temporal", "Postgres for effectively", "effectively worker", "NATS"}

// runCluster starts a split cluster on fresh databases, a stack against it
// (worker, streams, simulators, database), warms it up and measures one e2e
// run of cfg.ClusterMessages.
func runCluster(ctx context.Context, cfg Config, planner *planner) (*ClusterPhase, error) {
	dir, err := os.MkdirTemp("", "bench-cluster-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	const shards = 4
	c, err := cluster.Start(ctx, cluster.Options{
		Bin: filepath.Join(cfg.RepoRoot, "bin"), Dir: dir, Split: true, Fresh: true, Shards: shards,
		Database: "temporal_bench_" + randomTag(4), Namespace: "default",
	})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	ccfg := cfg
	ccfg.TemporalAddress, ccfg.TemporalMetricsURL = c.Address(), ""
	s, err := startStack(ctx, ccfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if _, err := s.runE2E(ctx, ccfg, planner.plan("cluster-warm", max(cfg.Warmup, 2*cfg.InFlight), 0, 0), e2eMode{inFlight: cfg.InFlight}); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	dbs := func() (temporal, effectively float64) {
		rows, err := s.admin.Query(ctx, `SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL`)
		if err != nil {
			return 0, 0
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n float64
			if rows.Scan(&name, &n) != nil {
				continue
			}
			switch {
			case strings.HasPrefix(name, c.Database()):
				temporal += n
			case name == s.dbName:
				effectively += n
			}
		}
		return temporal, effectively
	}
	type sample struct {
		services map[string]float64
		pg       map[string]map[int]float64
		commits  float64
	}
	take := func() sample {
		sm := sample{services: map[string]float64{}, pg: postgresCPUByDatabase()}
		for n, pid := range c.Pids() {
			sm.services[n] = cpuSeconds(pid)
		}
		sm.commits, _ = dbs()
		return sm
	}
	// Temporal commits on its own while idle (shard leases, queue
	// readers, timers): its rate, to tell a message's share apart.
	idle0, _ := dbs()
	idleStart := time.Now()
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return nil, err
	}
	idle1, _ := dbs()
	idleRate := (idle1 - idle0) / time.Since(idleStart).Seconds()
	before := take()
	phaseStart := time.Now()
	m := &meter{s: s, cfg: ccfg}
	r, err := m.e2e(ctx, planner.plan("cluster", cfg.ClusterMessages, cfg.DuplicateRatio, cfg.DeclineRatio), "unique message", nil)
	if err != nil {
		return nil, err
	}
	// Let Temporal's backends publish their counts (at their next
	// transaction: they poll continually).
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	after := take()
	r.Name = "e2e on the cluster"
	p := &ClusterPhase{Result: r, Shards: shards, CPUms: map[string]float64{}}
	n := float64(max(r.Unique, 1))
	for _, svc := range []string{"frontend", "history", "matching", "worker"} {
		key := svc
		if svc == "worker" {
			key = "worker (Temporal)"
		}
		p.CPUms[key] = 1000 * max(0, after.services[svc]-before.services[svc]) / n
	}
	var pgTemporal, pgEffectively float64
	for db, byPID := range after.pg {
		g := grown(before.pg[db], byPID)
		switch {
		case strings.HasPrefix(db, c.Database()):
			pgTemporal += g
		case db == s.dbName:
			pgEffectively += g
		}
	}
	p.CPUms["Postgres for Temporal"] = 1000 * pgTemporal / n
	p.CPUms["Postgres for effectively"] = 1000 * pgEffectively / n
	p.CPUms["effectively worker"] = 1000 * r.CPU.Worker / n
	p.CPUms["NATS"] = 1000 * r.CPU.NATS / n
	p.EffectivelyCommits = r.Costs.CommitsPer()
	p.TemporalCommits = (after.commits - before.commits) / n
	p.TemporalIdleCommitsPerSecond = idleRate
	p.TemporalNetCommits = max(0, after.commits-before.commits-idleRate*time.Since(phaseStart).Seconds()) / n
	for id, k := range s.stripe.Stats().ChargesByMessage {
		if k > 1 {
			return p, fmt.Errorf("%w: message %s charged %d times on the cluster", ErrDoubleCharge, id, k)
		}
	}
	return p, nil
}

// postgresCPUByDatabase returns the CPU seconds of every postgres backend,
// by the database its process title names; the server's own processes are
// left out.
func postgresCPUByDatabase() map[string]map[int]float64 {
	out := map[string]map[int]float64{}
	eachProcess(func(pid int, comm string, _ int) {
		if comm != "postgres" {
			return
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return
		}
		// "postgres: [cluster: ]user db host(port) state": the database
		// is the field before the client's address.
		f := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
		at := slices.IndexFunc(f, func(x string) bool { return strings.HasSuffix(x, ")") && strings.Contains(x, "(") })
		if len(f) < 4 || f[0] != "postgres:" || at < 3 {
			return
		}
		db := f[at-1]
		if out[db] == nil {
			out[db] = map[int]float64{}
		}
		out[db][pid] = cpuSeconds(pid)
	})
	return out
}

// clusterSection renders the cluster phase.
func (r Report) clusterSection() string {
	p := r.Cluster
	if p == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## On a Temporal server with Postgres\n\n%s %s on Postgres (`tools/cluster`), frontend, history, matching and worker in separate processes, %d history shards; effectively's database on the same Postgres server. %s\n\n",
		"Temporal server", cluster.ServerVersion, p.Shards, p.Result.short())
	b.WriteString("| component | CPU per unique message |\n|---|---|\n")
	var total float64
	for _, k := range clusterComponents {
		fmt.Fprintf(&b, "| %s | %.2f ms |\n", k, p.CPUms[k])
		total += p.CPUms[k]
	}
	fmt.Fprintf(&b, "| all of them | %.2f ms |\n\n", total)
	fmt.Fprintf(&b, "Postgres transactions per unique message: Temporal's persistence and visibility databases %.1f, or %.1f net of the %.0f/s it commits while idle (measured right before); effectively's %.2f.\n",
		p.TemporalCommits, p.TemporalNetCommits, p.TemporalIdleCommitsPerSecond, p.EffectivelyCommits)
	return b.String()
}
