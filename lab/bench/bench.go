// Package bench measures what effectively costs, honestly and side by side:
// the end-to-end path (messages published to JetStream, consumed by one real
// worker process, charged and receipted through the provider simulators,
// recorded in Postgres) against three reference points measured in the same
// run on the same dev server and Postgres — Temporal's floor (eager start +
// two no-op local activities), a naive layout (two regular activities,
// started from a separate client) and a plain transactional consumer with no
// Temporal at all — plus a sweep of in-flight limits that shows where latency
// bends, and the e2e path with 1, 2 and 3 worker processes.
//
// Beside the timings, which vary with the machine's load, it counts what a
// message costs in units that do not: Temporal actions by type (the dev
// server's `action` metric, what Temporal Cloud bills), history events, and
// Postgres transactions (pg_stat_database.xact_commit).
//
// It is a benchmark, not a test: Run reports what it measured and checks only
// that nothing was charged twice. The command is lab/bench/cmd/bench.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/tools/cluster"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// Config sizes a run. Zero fields take the defaults noted.
type Config struct {
	// Messages is how many messages the end-to-end run publishes,
	// duplicates included. Default 5000.
	Messages int `json:"messages"`
	// DuplicateRatio is the share of publishes that repeat an earlier
	// message, without Nats-Msg-Id so the broker lets them through.
	// Default 0.3; negative means none.
	DuplicateRatio float64 `json:"duplicate_ratio"`
	// DeclineRatio is the share of unique messages whose card is declined
	// (no receipt). Default 0.05; negative means none.
	DeclineRatio float64 `json:"decline_ratio"`
	// InFlight bounds the unique messages published and not yet recorded in
	// the end-to-end run, and the workflows in flight of the floor and the
	// naive layout. Default 16: the sweep's knee on this 2-core machine
	// (in-flight 8 ran 86 msg/s with a p99 of 158 ms, 128 ran 82 msg/s
	// with a p99 of 1.7 s: past the knee more in flight only queues).
	InFlight int `json:"in_flight"`
	// Sweep lists the in-flight limits of the sweep. Default 8, 16, 32,
	// 128; an empty non-nil slice skips the sweep (and the paced point at
	// 80% of the max rate).
	Sweep []int `json:"sweep"`
	// SweepMessages is how many messages each sweep point publishes,
	// duplicates included. Default 1000.
	SweepMessages int `json:"sweep_messages"`
	// Latency is the provider simulators' answer time. Default 3ms;
	// negative means none.
	Latency time.Duration `json:"latency"`
	// FloorWorkflows and NaiveWorkflows size the Temporal reference points.
	// Defaults 2000 and 1000.
	FloorWorkflows int `json:"floor_workflows"`
	NaiveWorkflows int `json:"naive_workflows"`
	// PlainMessages sizes the plain consumer run (duplicates included, at
	// DuplicateRatio). Default Messages.
	PlainMessages int `json:"plain_messages"`
	// PlainClients is the plain consumer's concurrency. Default 8.
	PlainClients int `json:"plain_clients"`
	// DuplicateBurst is how many copies of already recorded messages are
	// published at once to measure the suppression rate. Default
	// PlainMessages: the two rates it compares come from runs of one size
	// (a short burst's rate is mostly its start and its last poll).
	DuplicateBurst int `json:"duplicate_burst"`
	// Warmup is how many messages (and reference workflows) run before each
	// measured path, not counted. Default 20.
	Warmup int `json:"warmup"`
	// Poll is the interval of the completion query. Default 50ms.
	Poll time.Duration `json:"poll"`
	// Stall fails a phase that makes no progress for this long. Default 60s.
	Stall time.Duration `json:"stall"`
	// GrpcCompression is the gRPC compression of every Temporal client of
	// the run, the worker's (EFFECTIVELY_GRPC_COMPRESSION) and the
	// reference points': auto (the worker's default: none to a local
	// address, temporalclient.Compression), gzip (the SDK's default) or
	// none. Default auto.
	GrpcCompression string `json:"grpc_compression"`
	// TemporalCPUs places the run's processes on the CPUs: CPUsOwn puts the
	// dev server on half of them and the harness, the workers, Postgres and
	// the broker on the rest, the way a deployment runs Temporal on
	// machines of its own; CPUsShared lets every process use every CPU.
	// The cluster and drain phases, which start servers of their own, run
	// shared. CPUsOwn needs the dev server started here and 2 CPUs or more.
	// Default CPUsShared.
	TemporalCPUs string `json:"temporal_cpus"`
	// Rounds is how many counted e2e runs alternate with Temporal's floor:
	// floor, e2e, floor, … e2e, floor. Each e2e run's ratio divides its
	// rate by the mean of the two floors beside it, so that a change in the
	// machine's speed during the run moves both sides of each ratio; the
	// report gives the ratios' min, median and max. Each round runs
	// Messages and each floor FloorWorkflows. Default 2.
	Rounds int `json:"rounds"`
	// ProfileSeconds is how long the worker's CPU profile runs, from the
	// start of the e2e run; 0 takes the default 20, negative takes none.
	ProfileSeconds int `json:"profile_seconds"`
	// PaidMessages sizes the paid-only run that counts what a paid message
	// costs (no copies, no declines). Default 200.
	PaidMessages int `json:"paid_messages"`
	// Workers lists the worker process counts of the scale-out, each an
	// e2e run of ScaleMessages (default SweepMessages) against the same
	// dev server. Default 1, 2, 3; an empty non-nil slice skips it.
	Workers       []int `json:"workers"`
	ScaleMessages int   `json:"scale_messages"`
	// HTTPMessages sizes each run of the HTTP phase (closed loop, paced);
	// HTTPWaiters is how many requests wait at once. Defaults 300 and
	// 1000; a negative HTTPMessages skips the phase.
	HTTPMessages int `json:"http_messages"`
	HTTPWaiters  int `json:"http_waiters"`
	// Settle is how long each reading of the counts waits after a phase,
	// for the workers' trailing statements (the outbox relay's). Default 2s.
	Settle time.Duration `json:"settle"`
	// HistorySample is how many workflows of a counted phase have their
	// history length read. Default 50.
	HistorySample int `json:"history_sample"`
	// Timeout bounds the whole run. Default 30m.
	Timeout time.Duration `json:"timeout"`
	// Seed makes the message plan repeatable. Default: the time.
	Seed uint64 `json:"seed"`

	// TemporalAddress is a running server to use; empty starts a dev server
	// from TemporalCLI ($TEMPORAL_CLI, bin/temporal, temporal on PATH).
	TemporalAddress string `json:"temporal_address,omitempty"`
	TemporalCLI     string `json:"-"`
	// TemporalMetricsURL is the Prometheus endpoint of that server, where
	// its action counter is read; a dev server started here exposes its
	// own. Empty with TemporalAddress: actions are not counted.
	TemporalMetricsURL string `json:"-"`
	// PostgresURL is the maintenance database a fresh database is created
	// from. Default $TEST_DATABASE_URL, else the local server.
	PostgresURL string `json:"-"`
	// Broker is the broker the e2e path and the duplicate burst go through:
	// nats (JetStream), kafka or rabbitmq (lab/bench/broker.go). Default nats.
	Broker string `json:"broker"`
	// NATSURL is the NATS server (JetStream, and the outbox relay's).
	// Default $TEST_NATS_URL, else local.
	NATSURL string `json:"-"`
	// RepoRoot is where ./worker is built from. Default this repository.
	RepoRoot string `json:"-"`
	// WorkerBin is a prebuilt worker binary; empty builds one.
	WorkerBin string `json:"-"`
	// ClusterMessages is how many messages the e2e run on a Temporal server
	// with Postgres publishes (tools/cluster; needs bin/temporal-server).
	// Default 1000; negative skips the phase.
	ClusterMessages int `json:"cluster_messages"`
	// DrainBacklog is how many messages the backlog drain piles up
	// (drain.go). Default 10000; negative skips the phase.
	DrainBacklog int `json:"drain_backlog"`
	// WorkerEnv is appended to the worker's environment (NAME=value), e.g.
	// to try a tuning. It is printed in the report.
	WorkerEnv []string `json:"worker_env,omitempty"`
	// Logf receives progress lines. Default: none.
	Logf func(format string, args ...any) `json:"-"`
}

// QuickConfig is a small run for a quick look (the command's -quick).
func QuickConfig() Config {
	return Config{
		Messages: 600, Sweep: []int{8, 64}, SweepMessages: 300,
		FloorWorkflows: 300, NaiveWorkflows: 200, PlainMessages: 2000, ProfileSeconds: 4,
		PaidMessages: 100,
	}
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Messages, 5000)
	switch {
	case c.DuplicateRatio == 0:
		c.DuplicateRatio = 0.3
	case c.DuplicateRatio < 0:
		c.DuplicateRatio = 0
	}
	c.DuplicateRatio = math.Min(c.DuplicateRatio, 0.9)
	switch {
	case c.DeclineRatio == 0:
		c.DeclineRatio = 0.05
	case c.DeclineRatio < 0:
		c.DeclineRatio = 0
	}
	def(&c.InFlight, 16)
	if c.Sweep == nil {
		c.Sweep = []int{8, 16, 32, 128}
	}
	def(&c.SweepMessages, 1000)
	switch {
	case c.Latency == 0:
		c.Latency = 3 * time.Millisecond
	case c.Latency < 0:
		c.Latency = 0
	}
	def(&c.FloorWorkflows, 2000)
	def(&c.NaiveWorkflows, 1000)
	def(&c.PlainMessages, c.Messages)
	def(&c.PlainClients, 8)
	def(&c.DuplicateBurst, c.PlainMessages)
	def(&c.Warmup, 20)
	def(&c.PaidMessages, 200)
	if c.DrainBacklog == 0 {
		c.DrainBacklog = 10000
	}
	if c.ClusterMessages == 0 {
		c.ClusterMessages = 1000
	}
	if c.HTTPMessages == 0 {
		c.HTTPMessages = 300
	}
	def(&c.HTTPWaiters, 1000)
	if c.Workers == nil {
		c.Workers = []int{1, 2, 3}
	}
	def(&c.ScaleMessages, c.SweepMessages)
	if c.Settle <= 0 {
		c.Settle = 2 * time.Second
	}
	def(&c.HistorySample, 50)
	if c.Poll <= 0 {
		c.Poll = 50 * time.Millisecond
	}
	if c.Stall <= 0 {
		c.Stall = 60 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.GrpcCompression == "" {
		c.GrpcCompression = "auto"
	}
	if c.TemporalCPUs == "" {
		c.TemporalCPUs = CPUsShared
	}
	def(&c.Rounds, 2)
	if c.ProfileSeconds == 0 {
		c.ProfileSeconds = 20
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.PostgresURL == "" {
		c.PostgresURL = storetest.AdminURL()
	}
	if c.NATSURL == "" {
		c.NATSURL = testenv.NATSURL()
	}
	if c.Broker == "" {
		c.Broker = "nats"
	}
	if c.RepoRoot == "" {
		c.RepoRoot = testenv.RepoRoot()
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Latency summarises a set of per-message latencies.
type Latency struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// Result is one measured path.
type Result struct {
	// Name says which path it is.
	Name string `json:"name"`
	// InFlight is the concurrency limit it ran at (0: open loop).
	InFlight int `json:"in_flight"`
	// TargetRate is the paced rate of an open-loop run (unique/s), else 0.
	TargetRate float64 `json:"target_rate,omitempty"`
	// Messages counts what was sent, duplicates included; Unique the
	// distinct messages; Duplicates the copies sent.
	Messages   int `json:"messages"`
	Unique     int `json:"unique"`
	Duplicates int `json:"duplicates"`
	// Suppressed counts the copies the system recognised (the inbox's
	// duplicates counter, or the plain consumer's conflicts).
	Suppressed int `json:"suppressed"`
	// Elapsed runs from the first send to the last completion.
	Elapsed time.Duration `json:"elapsed"`
	// Throughput is unique messages (workflows) completed per second. For
	// the plain consumer it is every message handled (one transaction each,
	// duplicates included) per second: its insert rate.
	Throughput float64 `json:"throughput"`
	// DuplicateRate is suppressed copies per second over Elapsed.
	DuplicateRate float64 `json:"duplicate_rate"`
	// Latency runs from just before the publish (or start) to the effects
	// being recorded (or the workflow's result).
	Latency Latency `json:"latency"`
	// Stages splits an e2e message's latency at the inbox row's timestamps:
	// publish to the inbox insert (Intake), the insert to the row marked
	// dispatched after its start (Start), and that mark to the last effect
	// recorded (Effects; the workflow runs while the mark is made, so this
	// one can be 0). Nil for the reference points.
	Stages *Stages `json:"stages,omitempty"`
	// CPU is what the phase cost each process.
	CPU CPU `json:"cpu"`
	// Workers is how many worker processes ran the e2e path (0 for the
	// reference points).
	Workers int `json:"workers,omitempty"`
	// FloorBeside is, for a sweep point, the mean rate of the short floors
	// run right before and right after it (Report.SweepFloors): the
	// machine's speed at that moment.
	FloorBeside float64 `json:"floor_beside,omitempty"`
	// Costs are the phase's Temporal actions, Postgres commits and history
	// events, for the phases that count them.
	Costs *Costs `json:"costs,omitempty"`

	// workflowIDs are some of the phase's workflows, whose history length
	// is read.
	workflowIDs []string
}

// Stages are the latencies of the parts of the e2e path.
type Stages struct {
	// Publish is the publish call alone (until JetStream's ack), which
	// Intake includes.
	Publish Latency `json:"publish"`
	Intake  Latency `json:"intake"`
	Start   Latency `json:"start"`
	Effects Latency `json:"effects"`
}

// Burst is the duplicate-suppression measurement: copies of recorded
// messages published back to back through the broker.
type Burst struct {
	Copies     int           `json:"copies"`
	Suppressed int           `json:"suppressed"`
	Elapsed    time.Duration `json:"elapsed"`
	Rate       float64       `json:"rate"`
	CPU        CPU           `json:"cpu"`
	Costs      *Costs        `json:"costs,omitempty"`
}

// Target is one of the targets and whether this run met it.
type Target struct {
	What     string  `json:"what"`
	Want     string  `json:"want"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
}

// Report is everything a run measured.
type Report struct {
	Started     time.Time   `json:"started"`
	Environment Environment `json:"environment"`
	Config      Config      `json:"config"`
	E2E         Result      `json:"e2e"`
	// Paid is the paid-only e2e run that counts a paid message's costs.
	Paid  Result   `json:"paid"`
	Burst Burst    `json:"duplicate_burst"`
	Sweep []Result `json:"sweep"`
	// HTTP is the HTTP intake's phase; nil when skipped.
	HTTP *HTTPPhase `json:"http,omitempty"`
	// Paced is the e2e path paced at 80% of the highest rate measured.
	Paced *Result `json:"paced,omitempty"`
	// PacedFloor is Temporal's floor paced the same way, at 80% of the
	// rate of the floors beside the sweep's best point, with as many
	// workflows as Paced has unique messages: Temporal's own p99 at that
	// load.
	PacedFloor *Result `json:"paced_floor,omitempty"`
	// ScaleOut is the e2e path with 1, 2, 3… worker processes.
	ScaleOut []Result `json:"scale_out,omitempty"`
	// Floor is Temporal's floor measured right before the first e2e run,
	// FloorEnd right after the last one; E2E is the first e2e run.
	Floor    Result `json:"floor"`
	FloorEnd Result `json:"floor_end"`
	// Floors and E2ERounds are the interleaved series (Config.Rounds):
	// Floors[i] ran right before E2ERounds[i] and Floors[i+1] right after
	// it. Rounds pairs them; RatioSpread and CPURatioSpread summarise the
	// pairs. Empty in reports from before the series.
	Floors         []Result `json:"floors,omitempty"`
	E2ERounds      []Result `json:"e2e_rounds,omitempty"`
	Rounds         []Round  `json:"rounds,omitempty"`
	RatioSpread    Spread   `json:"ratio_spread"`
	CPURatioSpread Spread   `json:"cpu_ratio_spread"`
	// InstrRatioSpread is that of the instructions ratios (N 0 where
	// perf counted none).
	InstrRatioSpread Spread `json:"instructions_ratio_spread"`
	// CPUMeasure says what the CPU per message is measured in: /proc CPU
	// time always, and perf's instructions where the machine counts them
	// (or why it does not).
	CPUMeasure string `json:"cpu_measure,omitempty"`
	Naive      Result `json:"naive"`
	Plain      Result `json:"plain"`
	// CommitCheck compares the run's commit counts with Postgres's own.
	CommitCheck *CommitCheck `json:"commit_check,omitempty"`
	// Cluster is the e2e run on a Temporal server with Postgres; nil when
	// skipped.
	Cluster *ClusterPhase `json:"cluster,omitempty"`
	// Drain is the long backlog drain at Stripe's limits (drain.go); nil
	// when skipped.
	Drain *DrainPhase `json:"drain,omitempty"`
	// WorkerPeakRSSMB is the worker processes' largest VmHWM after the HTTP
	// phase; WorkerPeakRSSBeforeHTTPMB the same right before it (the
	// message path alone), 0 when there was no HTTP phase.
	WorkerPeakRSSMB           float64 `json:"worker_peak_rss_mb"`
	WorkerPeakRSSBeforeHTTPMB float64 `json:"worker_peak_rss_before_http_mb,omitempty"`
	// Charges and Emails are the simulators' counts over the whole run;
	// DoubleCharges counts messages charged more than once (must be 0);
	// DuplicateEmails counts receipts sent beyond one per message.
	Charges         int `json:"charges"`
	DoubleCharges   int `json:"double_charges"`
	Emails          int `json:"emails"`
	DuplicateEmails int `json:"duplicate_emails"`
	// Ratios against the reference points. E2EOverFloor is the median of
	// Rounds' ratios (each e2e run over the mean of the floors beside it);
	// FloorMean is the mean rate of every floor run.
	FloorMean      float64 `json:"floor_mean"`
	E2EOverFloor   float64 `json:"e2e_over_floor"`
	E2EOverNaive   float64 `json:"e2e_over_naive"`
	BurstOverPlain float64 `json:"burst_over_plain"`
	// MaxRate is the best rate of the sweep, the base of the paced point.
	MaxRate float64 `json:"max_rate"`
	// SweepFloors are the short floors run before the sweep and after each
	// of its points (Result.FloorBeside); Knee is the sweep's knee on that
	// basis (knee), 0 without a sweep.
	SweepFloors []float64 `json:"sweep_floors,omitempty"`
	Knee        int       `json:"knee,omitempty"`
	Targets     []Target  `json:"targets"`
	// WorkerWarnings counts the worker's WARN and ERROR log lines by
	// message, over the whole run.
	WorkerWarnings []LogCount `json:"worker_warnings"`
	// WorkerProfile is the worker's CPU profile during the e2e run (written
	// beside the report, not into the JSON); WorkerProfileWhat says how it
	// was taken, WorkerProfileFile and WorkerProfileTop are set by
	// WriteFiles.
	// ServerProfile splits the dev server's CPU during the first e2e round
	// and the floor after it; nil when not taken.
	ServerProfile     *ServerProfile `json:"server_profile,omitempty"`
	WorkerProfile     []byte         `json:"-"`
	WorkerProfileWhat string         `json:"worker_profile,omitempty"`
	WorkerProfileFile string         `json:"worker_profile_file,omitempty"`
	WorkerProfileTop  string         `json:"worker_profile_top,omitempty"`
	Notes             []string       `json:"notes"`
	Elapsed           time.Duration  `json:"elapsed"`
}

// LogCount is how often the worker logged one message at one level.
type LogCount struct {
	Level   string `json:"level"`
	Msg     string `json:"msg"`
	Count   int    `json:"count"`
	Example string `json:"example"` // the first such line's error or attributes
}

// warnings groups the WARN and ERROR lines of the worker's JSON log.
func warnings(logs string) []LogCount {
	idx := map[string]int{}
	var out []LogCount
	for line := range strings.SplitSeq(logs, "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		level, _ := l["level"].(string)
		if level != "WARN" && level != "ERROR" {
			continue
		}
		msg, _ := l["msg"].(string)
		k := level + "\x00" + msg
		i, ok := idx[k]
		if !ok {
			ex, _ := l["error"].(string)
			if ex == "" {
				delete(l, "time")
				b, _ := json.Marshal(l)
				ex = string(b)
			}
			i = len(out)
			idx[k] = i
			out = append(out, LogCount{Level: level, Msg: msg, Example: ex})
		}
		out[i].Count++
	}
	return out
}

// ErrDoubleCharge is returned with the report when a message was charged
// more than once.
var ErrDoubleCharge = errors.New("bench: a message was charged more than once")

// Run measures every path and returns the report. The error reports a run
// that could not be carried out, or ErrDoubleCharge (with a full report).
// Everything Run starts is stopped before it returns.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.setDefaults()
	if _, err := temporalclient.Compression(cfg.GrpcCompression, ""); err != nil {
		return Report{Config: cfg}, fmt.Errorf("bench: GrpcCompression: %w", err)
	}
	switch {
	case cfg.TemporalCPUs != CPUsOwn && cfg.TemporalCPUs != CPUsShared:
		return Report{Config: cfg}, fmt.Errorf("bench: TemporalCPUs %q: use %s or %s", cfg.TemporalCPUs, CPUsOwn, CPUsShared)
	case cfg.TemporalCPUs == CPUsOwn && cfg.TemporalAddress != "":
		return Report{Config: cfg}, fmt.Errorf("bench: TemporalCPUs %s needs the dev server started here, not %s", CPUsOwn, cfg.TemporalAddress)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	rep := Report{Started: time.Now(), Environment: hostEnvironment(), Config: cfg}
	logf := cfg.Logf
	rep.Environment.BackgroundBusy = backgroundBusy(2 * time.Second)
	if rep.Environment.BackgroundBusy > 0.15 {
		logf("bench: warning: the machine was %.0f%% busy before the run started (load average %s): other work will share the CPUs and lower every figure",
			rep.Environment.BackgroundBusy*100, rep.Environment.LoadAverage)
	}

	logf("bench: starting the stack (dev server, Postgres database, JetStream streams, simulators at %s, worker build)", cfg.Latency)
	s, err := startStack(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer s.close()
	rep.Environment.Postgres, rep.Environment.NATS, rep.Environment.Temporal = s.versions(ctx)
	rep.Environment.CPULayout = s.cpus.describe()
	logf("bench: CPUs: %s", rep.Environment.CPULayout)
	planner := newPlanner(cfg.Seed)
	rep.Environment.Commit = gitCommit(ctx, cfg.RepoRoot)

	// The naive layout on the fresh server, then the warm-ups.
	logf("bench: naive layout: %d workflows, 2 regular activities, separate client, in-flight %d", cfg.NaiveWorkflows, cfg.InFlight)
	if rep.Naive, err = s.runNaive(ctx, cfg, planner); err != nil {
		return rep, fmt.Errorf("naive: %w", err)
	}
	logf("bench: naive: %s", rep.Naive.short())
	if err := sleepCtx(ctx, naiveActivityTimeout+time.Second); err != nil { // its activities' timers (naiveActivityTimeout)
		return rep, err
	}
	// The e2e warm-up fills the in-flight limit twice, so the worker's pool
	// has opened its connections (and prepared its statements on each,
	// which Postgres counts as commits) before anything is counted.
	if _, err := s.runE2E(ctx, cfg, planner.plan("warm", max(cfg.Warmup, 2*cfg.InFlight), 0, 0), e2eMode{inFlight: cfg.InFlight}); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	plain := planner.plan("plain", cfg.PlainMessages, cfg.DuplicateRatio, 0)
	if err := s.warmPlain(ctx, cfg, planner); err != nil {
		return rep, err
	}

	// The counted phases, back to back: each reading waits for the counts
	// to settle and ends one phase and starts the next.
	m := &meter{s: s, cfg: cfg}
	// The floor and the e2e path interleaved, floor first and last: the dev
	// server slows as workflows accumulate and the machine's speed drifts
	// with other tenants' load, so each e2e run is compared with the floors
	// right beside it.
	instrEvent, why := probePerf(ctx, instructionEvents...)
	s.perfEvent = instrEvent
	if instrEvent != "" {
		rep.CPUMeasure = fmt.Sprintf("CPU instructions (`perf stat -e %s -p`, of the worker processes, the dev server and the harness) and user+system CPU time from /proc", instrEvent)
	} else {
		rep.CPUMeasure = fmt.Sprintf("user+system CPU time from /proc; CPU instructions are not counted (%s)", why)
	}
	logf("bench: CPU per message: %s", rep.CPUMeasure)
	main := planner.plan("e2e", cfg.Messages, cfg.DuplicateRatio, cfg.DeclineRatio)
	var serverE2E, serverFloor <-chan serverShares
	for i := 0; ; i++ {
		logf("bench: Temporal floor %d of %d: %d workflows, eager start + 2 no-op local activities, in-flight %d (counting actions and commits; each count waits %s to settle)",
			i+1, cfg.Rounds+1, cfg.FloorWorkflows, cfg.InFlight, cfg.Settle)
		if i == 1 {
			serverFloor = s.profileServer(ctx, min(serverProfileSeconds, cfg.ProfileSeconds))
		}
		f, err := m.floor(ctx)
		if err != nil {
			return rep, fmt.Errorf("floor %d: %w", i+1, err)
		}
		f.Name = fmt.Sprintf("Temporal floor %d", i+1)
		rep.Floors = append(rep.Floors, f)
		logf("bench: floor %d: %s; %s", i+1, f.short(), f.Costs.short())
		if i == cfg.Rounds {
			break
		}
		p, started := main, func() {}
		var prof <-chan profile
		if i == 0 {
			// The profile is taken during the first e2e run only.
			started = func() {
				prof = s.profileWorker(ctx, cfg.ProfileSeconds)
				serverE2E = s.profileServer(ctx, min(serverProfileSeconds, cfg.ProfileSeconds))
			}
		} else {
			p = planner.plan(fmt.Sprintf("e2e%d", i+1), cfg.Messages, cfg.DuplicateRatio, cfg.DeclineRatio)
		}
		logf("bench: e2e %d of %d: %d messages (%.0f%% duplicates), in-flight %d", i+1, cfg.Rounds, cfg.Messages, cfg.DuplicateRatio*100, cfg.InFlight)
		r, err := m.e2e(ctx, p, "unique message", started)
		if err != nil {
			return rep, fmt.Errorf("e2e %d: %w", i+1, err)
		}
		if prof != nil {
			if pr := <-prof; pr.err != nil {
				logf("bench: worker profile: %v", pr.err)
			} else {
				rep.WorkerProfile = pr.data
				rep.WorkerProfileWhat = fmt.Sprintf("%d s of the worker's CPU profile (`/debug/pprof/profile`, `EFFECTIVELY_PPROF_ADDR`), during e2e 1", cfg.ProfileSeconds)
			}
		}
		r.Name = fmt.Sprintf("e2e %d", i+1)
		rep.E2ERounds = append(rep.E2ERounds, r)
		logf("bench: e2e %d: %s; %s", i+1, r.short(), r.Costs.short())
	}
	if serverE2E != nil && serverFloor != nil {
		e, f := <-serverE2E, <-serverFloor
		if err := errors.Join(e.err, f.err); err != nil {
			logf("bench: dev server profile: %v", err)
		} else {
			rep.ServerProfile = &ServerProfile{E2E: e.shares, Floor: f.shares,
				What: fmt.Sprintf("%d s of `perf record -e cpu-clock -F 999 -g` on the dev server from the start of e2e 1, and from the start of floor 2, read with `perf report --children --sort symbol`", min(serverProfileSeconds, cfg.ProfileSeconds))}
		}
	}
	rep.E2E, rep.Floor, rep.FloorEnd = rep.E2ERounds[0], rep.Floors[0], rep.Floors[len(rep.Floors)-1]

	logf("bench: paid messages: %d, no copies, no declines, in-flight %d", cfg.PaidMessages, cfg.InFlight)
	if rep.Paid, err = m.e2e(ctx, planner.plan("paid", cfg.PaidMessages, 0, 0), "paid message", nil); err != nil {
		return rep, fmt.Errorf("paid messages: %w", err)
	}
	rep.Paid.Name = "e2e, paid messages only"
	logf("bench: paid: %s; %s", rep.Paid.short(), rep.Paid.Costs.short())

	logf("bench: duplicate burst: %d copies of recorded messages", cfg.DuplicateBurst)
	rep.Burst.Costs, err = m.phase(ctx, func() (int, string, []string) { return rep.Burst.Copies, "copy", nil }, func() error {
		var err error
		rep.Burst, err = s.runBurst(ctx, cfg, main, cfg.DuplicateBurst)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("duplicate burst: %w", err)
	}
	logf("bench: duplicate burst: %d suppressed in %s: %.0f/s; %s", rep.Burst.Suppressed, rep.Burst.Elapsed.Round(time.Millisecond), rep.Burst.Rate, rep.Burst.Costs.short())

	logf("bench: plain consumer: %d messages, %d connections", cfg.PlainMessages, cfg.PlainClients)
	rep.Plain.Costs, err = m.phase(ctx, func() (int, string, []string) { return rep.Plain.Messages, "message sent", nil }, func() error {
		var err error
		rep.Plain, err = s.runPlain(ctx, cfg, plain)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("plain consumer: %w", err)
	}
	logf("bench: plain: %s; %s", rep.Plain.short(), rep.Plain.Costs.short())

	// Timing only from here: the sweep, the paced point, the scale-out.
	// The paced point runs at a share of the sweep's best rate: runs of
	// its size, right before it. The e2e run's rate would overstate what
	// the stack manages by then (it is larger, and ran on a dev server
	// holding less history, which the floor's before and after show).
	// Each point sits between two short floors, so that its knee is read
	// from rates over the machine's speed right then.
	floorCfg := cfg
	floorCfg.FloorWorkflows = max(50, cfg.FloorWorkflows/4)
	sweepFloor := func() (float64, error) {
		f, err := s.runFloor(ctx, floorCfg, nil)
		rep.SweepFloors = append(rep.SweepFloors, f.Throughput)
		return f.Throughput, err
	}
	var before float64
	if len(cfg.Sweep) > 0 {
		if before, err = sweepFloor(); err != nil {
			return rep, fmt.Errorf("the sweep's first floor: %w", err)
		}
	}
	for i, n := range cfg.Sweep {
		p := planner.plan(fmt.Sprintf("sweep%d", i), cfg.SweepMessages, cfg.DuplicateRatio, cfg.DeclineRatio)
		r, err := s.runE2E(ctx, cfg, p, e2eMode{inFlight: n})
		if err != nil {
			return rep, fmt.Errorf("sweep at in-flight %d: %w", n, err)
		}
		after, err := sweepFloor()
		if err != nil {
			return rep, fmt.Errorf("the floor after the sweep's in-flight %d: %w", n, err)
		}
		r.FloorBeside, before = (before+after)/2, after
		r.Name = fmt.Sprintf("sweep in-flight %d", n)
		rep.Sweep = append(rep.Sweep, r)
		rep.MaxRate = math.Max(rep.MaxRate, r.Throughput)
		logf("bench: %s: %s; %.2f× the floors beside it (%.1f/s)", r.Name, r.short(), ratio(r.Throughput, r.FloorBeside), r.FloorBeside)
	}
	rep.Knee = knee(rep.Sweep)
	if len(cfg.Sweep) > 0 && rep.MaxRate > 0 {
		rate := rep.MaxRate * pacedShare
		p := planner.plan("paced", cfg.SweepMessages, cfg.DuplicateRatio, cfg.DeclineRatio)
		r, err := s.runE2E(ctx, cfg, p, e2eMode{rate: rate, inFlight: 4096})
		if err != nil {
			return rep, fmt.Errorf("paced point: %w", err)
		}
		r.Name = fmt.Sprintf("e2e at %.0f%% of the sweep's best rate", pacedShare*100)
		rep.Paced = &r
		logf("bench: %s (%.0f/s paced): %s", r.Name, rate, r.short())

		if best := bestPoint(rep.Sweep); best.FloorBeside > 0 {
			fcfg := cfg
			fcfg.FloorWorkflows = r.Unique
			frate := best.FloorBeside * pacedShare
			f, err := s.runFloorAt(ctx, fcfg, frate, nil)
			if err != nil {
				return rep, fmt.Errorf("paced floor: %w", err)
			}
			f.Name = fmt.Sprintf("Temporal floor at %.0f%% of the floors beside the sweep's best point", pacedShare*100)
			rep.PacedFloor = &f
			logf("bench: %s (%.0f/s paced): %s", f.Name, frate, f.short())
		}
	}
	for i, n := range cfg.Workers {
		logf("bench: scale-out: %d worker processes, %d messages, in-flight %d", n, cfg.ScaleMessages, cfg.InFlight)
		if err := s.setWorkers(ctx, n); err != nil {
			return rep, fmt.Errorf("scale-out to %d workers: %w", n, err)
		}
		p := planner.plan(fmt.Sprintf("scale%d", i), cfg.ScaleMessages, cfg.DuplicateRatio, cfg.DeclineRatio)
		r, err := s.runE2E(ctx, cfg, p, e2eMode{inFlight: cfg.InFlight})
		if err != nil {
			return rep, fmt.Errorf("scale-out with %d workers: %w", n, err)
		}
		r.Name, r.Workers = fmt.Sprintf("e2e, %d worker processes", n), n
		rep.ScaleOut = append(rep.ScaleOut, r)
		logf("bench: %s: %s", r.Name, r.short())
	}
	if err := s.setWorkers(ctx, 1); err != nil {
		return rep, err
	}
	if cfg.HTTPMessages > 0 {
		rep.WorkerPeakRSSBeforeHTTPMB = s.workersPeakRSSMB()
		logf("bench: HTTP intake: %d × submit + wait closed loop (%d clients), the same paced at %.0f%%, duplicate POSTs, %d waiters", cfg.HTTPMessages, cfg.InFlight, pacedShare*100, cfg.HTTPWaiters)
		ph, err := s.runHTTP(ctx, cfg)
		if err != nil {
			return rep, fmt.Errorf("http intake: %w", err)
		}
		rep.HTTP = &ph
		logf("bench: HTTP: %s", ph.short(rep.Burst.Rate))
	}
	rep.WorkerPeakRSSMB = s.workersPeakRSSMB()
	if err := s.setWorkers(ctx, 1); err != nil {
		return rep, err
	}

	rep.WorkerWarnings = warnings(s.worker.Logs() + "\n" + s.extraLogs)
	for _, w := range rep.WorkerWarnings {
		logf("bench: worker %s ×%d: %s (e.g. %s)", w.Level, w.Count, w.Msg, w.Example)
	}
	st, sg := s.stripe.Stats(), s.sendgrid.Stats()
	rep.Charges, rep.Emails = st.Charges, sg.Deliveries
	for _, n := range st.ChargesByMessage {
		if n > 1 {
			rep.DoubleCharges++
		}
	}
	for k, n := range sg.DeliveriesByKey {
		if k != "" && n > 1 {
			rep.DuplicateEmails += n - 1
		}
	}
	cc, err := s.crossCheck(ctx)
	if err != nil {
		logf("bench: commit cross-check: %v", err)
	} else {
		rep.CommitCheck = &cc
		logf("bench: commits over the run: xact_commit %.0f, counted %.0f (proxy %.0f, harness %.0f): %.2f%% apart",
			cc.XactCommit, cc.Proxy+cc.Harness, cc.Proxy, cc.Harness, cc.Difference()*100)
	}
	// The cluster and the drain start servers of their own, which the
	// layout did not place: every process gets every CPU back.
	s.cpus.undo()
	if cfg.ClusterMessages > 0 {
		logf("bench: cluster: Temporal server %s on Postgres, four processes, %d messages (the dev server's stack idles meanwhile)", cluster.ServerVersion, cfg.ClusterMessages)
		if rep.Cluster, err = runCluster(ctx, cfg, planner); err != nil {
			return rep, fmt.Errorf("cluster: %w", err)
		}
		logf("bench: cluster: %s", rep.Cluster.Result.short())
	}
	if cfg.DrainBacklog > 0 {
		logf("bench: drain: %d messages piled up while the workers are stopped, drained at Stripe's limits", cfg.DrainBacklog)
		if rep.Drain, err = runDrain(ctx, cfg, cfg.DrainBacklog); err != nil {
			return rep, fmt.Errorf("drain: %w", err)
		}
		logf("bench: drain: %s", strings.TrimSpace(rep.Drain.Report.String()))
	}
	rep.evaluate()
	rep.Elapsed = time.Since(rep.Started)
	if rep.DoubleCharges > 0 {
		return rep, ErrDoubleCharge
	}
	return rep, nil
}

// pacedShare is where the paced point runs: this share of the sweep's
// best rate.
const pacedShare = 0.8

// meter chains the counted phases: the reading that ends one phase starts
// the next, so each settle wait is paid once.
type meter struct {
	s    *stack
	cfg  Config
	last *reading
}

// phase runs run between two readings and returns its costs over the
// units that units returns once it has run (with some of its workflows,
// whose history length is read).
func (m *meter) phase(ctx context.Context, units func() (int, string, []string), run func() error) (*Costs, error) {
	if m.last == nil {
		r, err := m.s.read(ctx, m.cfg)
		if err != nil {
			return nil, err
		}
		m.last = &r
	}
	a := *m.last
	m.last = nil
	if err := run(); err != nil {
		return nil, err
	}
	b, err := m.s.read(ctx, m.cfg)
	if err != nil {
		return nil, err
	}
	m.last = &b
	n, unit, ids := units()
	c := costsBetween(a, b, n, unit)
	if len(ids) > m.cfg.HistorySample {
		ids = ids[:m.cfg.HistorySample]
	}
	if c.HistoryEvents, c.HistorySample, c.HistoryBytes, err = m.s.historyEvents(ctx, ids); err != nil {
		m.cfg.Logf("bench: history length not read: %v", err)
	}
	return c, nil
}

// e2e is a counted e2e run of p, closed loop at the configured in-flight;
// started is called right before it publishes.
func (m *meter) e2e(ctx context.Context, p plan, unit string, started func()) (Result, error) {
	var r Result
	costs, err := m.phase(ctx, func() (int, string, []string) { return r.Unique, unit, r.workflowIDs }, func() error {
		if started != nil {
			started()
		}
		var err error
		r, err = m.s.runE2E(ctx, m.cfg, p, e2eMode{inFlight: m.cfg.InFlight})
		return err
	})
	r.Costs = costs
	return r, err
}

// floor is a run of Temporal's floor, counted without its warm-up.
func (m *meter) floor(ctx context.Context) (Result, error) {
	var (
		r     Result
		costs *Costs
	)
	// Its warm-up runs before the first reading: a fresh one.
	m.last = nil
	r, err := m.s.runFloor(ctx, m.cfg, func(run func() error) error {
		var err error
		costs, err = m.phase(ctx, func() (int, string, []string) { return m.cfg.FloorWorkflows, "workflow", nil }, run)
		return err
	})
	if err != nil {
		return r, err
	}
	// The history sample's IDs are known once the run returns.
	if costs.HistoryEvents, costs.HistorySample, costs.HistoryBytes, err = m.s.historyEvents(ctx, r.workflowIDs); err != nil {
		m.cfg.Logf("bench: history length not read: %v", err)
	}
	r.Costs = costs
	return r, nil
}

// kneeShare is how close to the sweep's best relative rate its knee is.
const kneeShare = 0.95

// knee is the smallest in-flight limit of the sweep whose rate over the
// floors beside it is within kneeShare of the best such rate: past it, more
// in flight only queues. 0 without a sweep.
func knee(sweep []Result) int {
	var best float64
	for _, r := range sweep {
		best = math.Max(best, ratio(r.Throughput, r.FloorBeside))
	}
	k := 0
	for _, r := range sweep {
		if best > 0 && ratio(r.Throughput, r.FloorBeside) >= kneeShare*best && (k == 0 || r.InFlight < k) {
			k = r.InFlight
		}
	}
	return k
}

// serverRatioSpread is that of the dev server's CPU per message, each e2e
// run over the floors beside it.
func (r *Report) serverRatioSpread() Spread {
	var ratios []float64
	for _, x := range r.Rounds {
		ratios = append(ratios, ratio(x.Server, x.FloorServer))
	}
	return spreadOf(ratios)
}

// workersPeakRSSMB is the largest VmHWM of the worker processes.
func (s *stack) workersPeakRSSMB() float64 {
	peak := peakRSSMB(s.worker.Pid())
	for _, p := range s.extra {
		peak = math.Max(peak, peakRSSMB(p.Pid()))
	}
	return peak
}

// bestPoint is the sweep's point of the highest rate (zero without one).
func bestPoint(sweep []Result) Result {
	var best Result
	for _, r := range sweep {
		if r.Throughput > best.Throughput {
			best = r
		}
	}
	return best
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// Round is one e2e run of the interleaved series beside the floors right
// before and right after it.
type Round struct {
	// E2E, FloorBefore and FloorAfter are the rates (unique messages,
	// workflows per second); Ratio is E2E over the floors' mean.
	E2E         float64 `json:"e2e"`
	FloorBefore float64 `json:"floor_before"`
	FloorAfter  float64 `json:"floor_after"`
	Ratio       float64 `json:"ratio"`
	// E2ECPU is the CPU milliseconds of the run's own processes (CPU.own:
	// other tenants' work left out) per unique message, FloorCPU the
	// floors' mean per workflow; CPURatio is E2ECPU over
	// FloorCPU. Worker and Server split E2ECPU, FloorServer the floors'.
	E2ECPU      float64 `json:"e2e_cpu_ms"`
	FloorCPU    float64 `json:"floor_cpu_ms"`
	CPURatio    float64 `json:"cpu_ratio"`
	Worker      float64 `json:"worker_cpu_ms"`
	Server      float64 `json:"server_cpu_ms"`
	FloorServer float64 `json:"floor_server_cpu_ms"`
	// E2EInstr and FloorInstr are the instructions per unique message and
	// per workflow of the worker processes, the dev server and the harness
	// together, where perf counted them (else 0); InstrRatio divides them.
	E2EInstr   float64 `json:"e2e_instructions,omitempty"`
	FloorInstr float64 `json:"floor_instructions,omitempty"`
	InstrRatio float64 `json:"instructions_ratio,omitempty"`
}

// Spread is the min, median and max of a set of ratios.
type Spread struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func spreadOf(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	vs = slices.Clone(vs)
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return Spread{N: len(vs), Min: vs[0], Median: med, Max: vs[len(vs)-1]}
}

func (s Spread) String() string {
	pairs := "pairs"
	if s.N == 1 {
		pairs = "pair"
	}
	return fmt.Sprintf("%.2f× median (min %.2f, max %.2f, %d %s)", s.Median, s.Min, s.Max, s.N, pairs)
}

func instructionsTotal(c CPU) float64 {
	var t float64
	for _, v := range c.Instructions {
		t += v
	}
	return t
}

// rounds pairs each e2e run of the series with the floors beside it.
func (r *Report) rounds() []Round {
	var out []Round
	for i, e := range r.E2ERounds {
		if i+1 >= len(r.Floors) {
			break
		}
		a, b := r.Floors[i], r.Floors[i+1]
		floorRate := (a.Throughput + b.Throughput) / 2
		floorCPU := (perUnit(a.CPU.own(), a.Unique) + perUnit(b.CPU.own(), b.Unique)) / 2
		x := Round{
			E2E: e.Throughput, FloorBefore: a.Throughput, FloorAfter: b.Throughput, Ratio: ratio(e.Throughput, floorRate),
			E2ECPU: perUnit(e.CPU.own(), e.Unique), FloorCPU: floorCPU,
			Worker: perUnit(e.CPU.Worker, e.Unique), Server: perUnit(e.CPU.Server, e.Unique),
			FloorServer: (perUnit(a.CPU.Server, a.Unique) + perUnit(b.CPU.Server, b.Unique)) / 2,
		}
		x.CPURatio = ratio(x.E2ECPU, x.FloorCPU)
		if ia, ib, ie := instructionsTotal(a.CPU), instructionsTotal(b.CPU), instructionsTotal(e.CPU); ia > 0 && ib > 0 && ie > 0 && e.Unique > 0 {
			x.E2EInstr = ie / float64(e.Unique)
			x.FloorInstr = (ia/float64(a.Unique) + ib/float64(b.Unique)) / 2
			x.InstrRatio = ratio(x.E2EInstr, x.FloorInstr)
		}
		out = append(out, x)
	}
	return out
}

// evaluate computes the ratios and checks the targets, each from
// this run's measurements.
func (r *Report) evaluate() {
	if len(r.Floors) == 0 { // a report of the older layout: one e2e run between two floors
		r.Floors, r.E2ERounds = []Result{r.Floor, r.FloorEnd}, []Result{r.E2E}
	}
	r.Rounds = r.rounds()
	var ratios, cpuRatios, instrRatios []float64
	for _, x := range r.Rounds {
		ratios = append(ratios, x.Ratio)
		cpuRatios = append(cpuRatios, x.CPURatio)
		if x.InstrRatio > 0 {
			instrRatios = append(instrRatios, x.InstrRatio)
		}
	}
	r.RatioSpread, r.CPURatioSpread, r.InstrRatioSpread = spreadOf(ratios), spreadOf(cpuRatios), spreadOf(instrRatios)
	r.FloorMean = 0
	for _, f := range r.Floors {
		r.FloorMean += f.Throughput / float64(len(r.Floors))
	}
	r.E2EOverFloor = r.RatioSpread.Median
	var e2eRates, floorRates []string
	for _, e := range r.E2ERounds {
		e2eRates = append(e2eRates, fmt.Sprintf("%.1f", e.Throughput))
	}
	for _, f := range r.Floors {
		floorRates = append(floorRates, fmt.Sprintf("%.1f", f.Throughput))
	}
	r.E2EOverNaive = ratio(r.E2E.Throughput, r.Naive.Throughput)
	r.BurstOverPlain = ratio(r.Burst.Rate, r.Plain.Throughput)
	r.Targets = []Target{{What: "e2e / Temporal floor (each e2e run over the mean of the floors right before and after it)", Want: "≥ 0.8× (median)", Value: r.E2EOverFloor, Met: r.E2EOverFloor >= ratioTarget,
		Measured: fmt.Sprintf("%s; e2e %s /s, floors %s /s in run order", r.RatioSpread, strings.Join(e2eRates, ", "), strings.Join(floorRates, ", "))}}

	sr := r.serverRatioSpread()
	t0 := Target{What: "dev server CPU per message, e2e / floor (each e2e run over the mean of the floors beside it)", Want: "≤ 1.1× (median)", Value: sr.Median, Met: sr.N > 0 && sr.Median <= serverTarget}
	if sr.N == 0 {
		t0.Measured = "not measured"
	} else {
		t0.Measured = fmt.Sprintf("%s; the run's own processes, /proc CPU time: %s", sr, r.CPURatioSpread)
		if r.InstrRatioSpread.N > 0 {
			t0.Measured += fmt.Sprintf("; instructions of the workers, dev server and harness: %s", r.InstrRatioSpread)
		}
	}
	r.Targets = append(r.Targets, t0)

	paid, floor := r.Paid.Costs, r.Floor.Costs
	t := Target{What: "Temporal actions per paid message", Want: "= the floor's per workflow"}
	switch {
	case !paid.ActionsMeasured() || !floor.ActionsMeasured() || paid.Units == 0 || floor.Units == 0:
		t.Measured = "not measured (no Temporal metrics)"
	default:
		t.Want = fmt.Sprintf("≤ the floor's (%.2f)", floor.ActionsPer())
		t.Value = paid.ActionsPer()
		// Actions are whole numbers per workflow: allow only the rounding
		// of a mean, not a fraction of an action.
		t.Met = t.Value <= floor.ActionsPer()+0.005
		t.Measured = fmt.Sprintf("%.2f (%s)", t.Value, paid.ActionsByType())
	}
	r.Targets = append(r.Targets, t)

	t = Target{What: "Temporal actions per duplicate (duplicate burst)", Want: "0"}
	if b := r.Burst.Costs; !b.ActionsMeasured() || b.Units == 0 {
		t.Measured = "not measured (no Temporal metrics)"
	} else {
		t.Value = b.ActionsPer()
		t.Met = b.ActionsTotal() == 0
		t.Measured = fmt.Sprintf("%.3f (%.0f actions for %d copies)", t.Value, b.ActionsTotal(), b.Units)
	}
	r.Targets = append(r.Targets, t)

	t = Target{What: "Postgres transactions per unique message (e2e)", Want: "≤ 3"}
	if e := r.E2E.Costs; !e.CommitsMeasured() || e.Units == 0 {
		t.Measured = "not measured"
	} else {
		t.Value = e.CommitsPer()
		t.Met = t.Value <= 3
		t.Measured = fmt.Sprintf("%.2f (%.0f commits for %d unique messages, %d sent)", t.Value, e.Commits, e.Units, r.E2E.Messages)
	}
	r.Targets = append(r.Targets, t)

	if r.Paced != nil {
		p99 := r.Paced.Latency.P99
		r.Targets = append(r.Targets, Target{What: "p99 at 80% of the max rate", Want: "≤ 150 ms", Value: ms(p99), Met: p99 <= p99Target*time.Millisecond && p99 > 0,
			Measured: fmt.Sprintf("%.0f ms at %.1f msg/s paced (the sweep's best %.1f)%s", ms(p99), r.Paced.TargetRate, r.MaxRate, r.pacedFloorText())})
	} else {
		r.Targets = append(r.Targets, Target{What: "p99 at 80% of the max rate", Want: "≤ 150 ms", Measured: "not measured (no sweep)"})
	}
	r.Targets = append(r.Targets,
		Target{What: "duplicates suppressed / plain consumer insert rate", Want: "≥ 1×", Value: r.BurstOverPlain, Met: r.BurstOverPlain >= 1,
			Measured: fmt.Sprintf("%.2f× (%.0f / %.0f per s)", r.BurstOverPlain, r.Burst.Rate, r.Plain.Throughput)},
		Target{What: "worker peak RSS", Want: "≤ 150 MB", Value: r.WorkerPeakRSSMB, Met: r.WorkerPeakRSSMB > 0 && r.WorkerPeakRSSMB <= rssTarget,
			Measured: r.rssText()},
		Target{What: "double charges, duplicate receipts", Want: "0 and 0", Value: float64(r.DoubleCharges + r.DuplicateEmails),
			Met:      r.Charges > 0 && r.DoubleCharges == 0 && r.DuplicateEmails == 0,
			Measured: fmt.Sprintf("%d and %d (%d charges, %d receipts)", r.DoubleCharges, r.DuplicateEmails, r.Charges, r.Emails)},
	)
	r.Targets = append(r.Targets, r.Drain.targets()...)
}

// rssText is the peak RSS target's measurement, with the message path's
// own peak when the HTTP phase's waiters came after it.
func (r *Report) rssText() string {
	if r.WorkerPeakRSSBeforeHTTPMB <= 0 {
		return fmt.Sprintf("%.1f MB", r.WorkerPeakRSSMB)
	}
	return fmt.Sprintf("%.1f MB (%.1f MB before the HTTP phase)", r.WorkerPeakRSSMB, r.WorkerPeakRSSBeforeHTTPMB)
}

// pacedFloorText is Temporal's own p99 at the paced share of its rate, for
// the p99 target's line ("" when not measured).
func (r *Report) pacedFloorText() string {
	f := r.PacedFloor
	if f == nil || f.Latency.P99 <= 0 {
		return ""
	}
	return fmt.Sprintf("; Temporal's floor at %.0f%% of its own rate: %.0f ms", pacedShare*100, ms(f.Latency.P99))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r Result) short() string {
	s := fmt.Sprintf("%d unique in %s: %.1f/s, dup %.1f/s, p50 %.0fms p99 %.0fms max %.0fms, worker CPU %.1fs",
		r.Unique, r.Elapsed.Round(time.Millisecond), r.Throughput, r.DuplicateRate,
		ms(r.Latency.P50), ms(r.Latency.P99), ms(r.Latency.Max), r.CPU.Worker)
	if st := r.Stages; st != nil {
		s += fmt.Sprintf(" (p50/p99/max ms: publish %.0f/%.0f/%.0f, intake %.0f/%.0f/%.0f, start %.0f/%.0f, effects %.0f/%.0f)",
			ms(st.Publish.P50), ms(st.Publish.P99), ms(st.Publish.Max), ms(st.Intake.P50), ms(st.Intake.P99), ms(st.Intake.Max), ms(st.Start.P50), ms(st.Start.P99), ms(st.Effects.P50), ms(st.Effects.P99))
	}
	return s
}
