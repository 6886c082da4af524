// Command bench runs effectively's benchmark (lab/bench): the
// end-to-end path through JetStream and one real worker process, Temporal's
// floor, a naive layout and a plain transactional consumer, all in one run
// on the same dev server and Postgres, plus a sweep of in-flight limits and a
// scale-out to more worker processes. It counts Temporal actions (the dev
// server's action metric), history events and Postgres commits per message.
// It prints a table and writes results/bench-<timestamp>.md, .png and .json.
//
//	go run ./lab/bench/cmd/bench                 # the defaults: 5000 messages, 30% copies
//	go run ./lab/bench/cmd/bench -quick          # a small run
//	go run ./lab/bench/cmd/bench -n 2000 -sweep 8,64 -latency 10ms
//	go run ./lab/bench/cmd/bench -n 300 -sweep none -workers 1,2,3
//	go run ./lab/bench/cmd/bench -n 400 -floor 300 -rounds 3 -sweep none -workers none -http-n -1 -drain -1 -cluster -1 -naive 50 -plain 300 -paid 50 -profile 0  # the floor/e2e series alone, a few minutes
//
// It needs Postgres (TEST_DATABASE_URL), NATS with JetStream (TEST_NATS_URL)
// and the Temporal CLI (bin/temporal or TEMPORAL_CLI). Exit codes: 0 the run
// completed (targets met or not: see the report), 1 the run could not be
// carried out, 2 usage, 3 a message was charged twice.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/effectively/effectively/lab/bench"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var (
		quick     = fs.Bool("quick", false, "a small run (600 messages, sweep 8,64, small reference points); explicit flags still apply")
		n         = fs.Int("n", 0, "messages published in the e2e run, copies included (default 5000)")
		dup       = fs.Float64("dup", -1, "share of copies among them, 0 to 0.9 (default 0.3)")
		inflight  = fs.Int("inflight", 0, "in-flight limit of the e2e run and the Temporal reference points (default 16, the sweep's knee)")
		sweep     = fs.String("sweep", "", `in-flight limits of the sweep, comma separated, or "none" (default 8,16,32,128)`)
		latency   = fs.Duration("latency", -1, "provider simulator latency (default 3ms)")
		sweepN    = fs.Int("sweep-n", 0, "messages per sweep point (default 1000)")
		workers   = fs.String("workers", "", `worker process counts of the scale-out, comma separated, or "none" (default 1,2,3)`)
		scaleN    = fs.Int("scale-n", 0, "messages per scale-out point (default: -sweep-n)")
		paidN     = fs.Int("paid", 0, "messages of the paid-only run that counts a paid message's actions and commits (default 200)")
		drainN    = fs.Int("drain", 0, "messages of the backlog drain at Stripe's limits, -1 for none (default 10000)")
		clusterN  = fs.Int("cluster", 0, "messages of the e2e run on a Temporal server with Postgres (needs make bin/temporal-server), -1 for none (default 1000)")
		httpN     = fs.Int("http-n", 0, "submit + wait requests of each HTTP intake run, -1 skips the HTTP phase (default 300)")
		waiters   = fs.Int("http-waiters", 0, "concurrent Prefer: wait requests of the HTTP phase (default 1000)")
		settle    = fs.Duration("settle", 0, "wait before each reading of the counts, for the workers' trailing statements (default 2s)")
		metrics   = fs.String("temporal-metrics", "", "Prometheus endpoint of the -temporal server, for its action counter (a dev server started here exposes its own)")
		compress  = fs.String("grpc-compression", "", "gRPC compression of every Temporal client, the worker's included: auto (none to a local address), gzip or none (default auto, the worker's default)")
		cpus      = fs.String("temporal-cpus", "", "own: the dev server on half the CPUs, the harness, the workers, Postgres and the broker on the rest (the shape of a deployment, Temporal on machines of its own); shared: every process on every CPU (default shared)")
		rounds    = fs.Int("rounds", 0, "e2e runs interleaved with Temporal's floor (floor, e2e, floor, …, floor); each ratio uses the floors beside its e2e run (default 2)")
		floorN    = fs.Int("floor", 0, "workflows of each Temporal floor run (default 2000)")
		naiveN    = fs.Int("naive", 0, "workflows of the naive layout (default 1000)")
		plainN    = fs.Int("plain", 0, "messages of the plain consumer, and copies of the duplicate burst (default -n)")
		workerBin = fs.String("worker-bin", "", "a prebuilt worker binary to measure (default: build ./worker from this checkout)")
		profile   = fs.Int("profile", 0, "seconds of the worker's CPU profile taken during the e2e run, 0 for none (default 20); the dev server's perf profile takes up to 6 of them, in the e2e run and the floor after it")
		out       = fs.String("out", "results", "folder for the markdown report, the PNG chart and the JSON")
		temporal  = fs.String("temporal", "", "address of a running Temporal server (default: start a dev server from bin/temporal)")
		seed      = fs.Uint64("seed", 0, "seed of the message plan (default: the time)")
		quiet     = fs.Bool("q", false, "no progress lines on stderr")
		fromJSON  = fs.String("from-json", "", "render the table, report and chart again from a run's JSON, without running anything")
		broker    = fs.String("broker", "nats", "broker of the e2e path and the duplicate burst: nats, kafka or rabbitmq (make bench BROKER=…)")
		workerEnv multiFlag
	)
	fs.Var(&workerEnv, "worker-env", "NAME=value added to the worker's environment (repeatable)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *fromJSON != "" {
		return rerender(*fromJSON, *out)
	}
	cfg := bench.Config{}
	if *quick {
		cfg = bench.QuickConfig()
	}
	if *n > 0 {
		cfg.Messages = *n
	}
	switch {
	case *dup == 0:
		cfg.DuplicateRatio = -1 // none
	case *dup > 0:
		cfg.DuplicateRatio = *dup
	}
	if *inflight > 0 {
		cfg.InFlight = *inflight
	}
	if *sweep != "" {
		s, err := parseSweep(*sweep)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -sweep:", err)
			return 2
		}
		cfg.Sweep = s
	}
	switch {
	case *latency == 0:
		cfg.Latency = -1 // none
	case *latency > 0:
		cfg.Latency = *latency
	}
	if *sweepN > 0 {
		cfg.SweepMessages = *sweepN
	}
	if *workers != "" {
		w, err := parseSweep(*workers)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -workers:", err)
			return 2
		}
		cfg.Workers = w
	}
	if *scaleN > 0 {
		cfg.ScaleMessages = *scaleN
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	if *floorN > 0 {
		cfg.FloorWorkflows = *floorN
	}
	if *naiveN > 0 {
		cfg.NaiveWorkflows = *naiveN
	}
	if *plainN > 0 {
		cfg.PlainMessages, cfg.DuplicateBurst = *plainN, *plainN
	}
	if *paidN > 0 {
		cfg.PaidMessages = *paidN
	}
	if *clusterN != 0 {
		cfg.ClusterMessages = *clusterN
	}
	if *httpN != 0 {
		cfg.HTTPMessages = *httpN
	}
	if *waiters > 0 {
		cfg.HTTPWaiters = *waiters
	}
	if *drainN != 0 {
		cfg.DrainBacklog = *drainN
	}
	if *settle > 0 {
		cfg.Settle = *settle
	}
	cfg.TemporalMetricsURL = *metrics
	switch *broker {
	case "nats", "kafka", "rabbitmq":
		cfg.Broker = *broker
	default:
		fmt.Fprintf(os.Stderr, "bench: -broker %q: use nats, kafka or rabbitmq\n", *broker)
		return 2
	}
	cfg.TemporalCPUs = *cpus
	switch *compress {
	case "", "auto", "gzip", "none":
		cfg.GrpcCompression = *compress
	default:
		fmt.Fprintf(os.Stderr, "bench: -grpc-compression %q: use auto, gzip or none\n", *compress)
		return 2
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "profile" {
			cfg.ProfileSeconds = *profile
			if *profile == 0 {
				cfg.ProfileSeconds = -1 // none
			}
		}
	})
	cfg.TemporalAddress, cfg.Seed, cfg.WorkerEnv, cfg.WorkerBin = *temporal, *seed, workerEnv, *workerBin
	if !*quiet {
		cfg.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil && !errors.Is(err, bench.ErrDoubleCharge) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	rep.WriteTable(os.Stdout)
	md, werr := rep.WriteFiles(*out)
	if werr != nil {
		fmt.Fprintln(os.Stderr, "bench: write the report:", werr)
		return 1
	}
	fmt.Printf("\nreport: %s (chart and JSON beside it)\n", md)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 3
	}
	return 0
}

func rerender(path, out string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", path, err)
		return 1
	}
	rep.WriteTable(os.Stdout)
	md, err := rep.WriteFiles(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: write the report:", err)
		return 1
	}
	fmt.Printf("\nreport: %s (chart and JSON beside it)\n", md)
	return 0
}

func parseSweep(s string) ([]int, error) {
	if s == "none" {
		return []int{}, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q: want NAME=value", v)
	}
	*m = append(*m, v)
	return nil
}
