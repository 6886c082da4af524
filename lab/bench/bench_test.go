package bench

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTinyRun runs the whole benchmark at a tiny size — every phase, one
// sweep point, the paced point and a scale-out to 2 workers, nothing
// skipped — to check that the harness works and that nothing was charged
// twice. The timings of so small a run mean nothing; only their presence is
// checked. The counts do not depend on size or load, so the ones whose
// right value is known are checked exactly: the floor's workflow costs one
// start and one batch of markers, each paid message starts one workflow,
// the plain consumer commits once per message.
func TestTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cfg := Config{
		Messages: 100, InFlight: 16, Sweep: []int{16}, SweepMessages: 60,
		FloorWorkflows: 50, NaiveWorkflows: 30, PlainMessages: 300, PlainClients: 4,
		DuplicateBurst: 100, Warmup: 5, Stall: 30 * time.Second, Timeout: 5 * time.Minute,
		PaidMessages: 30, Workers: []int{1, 2}, ScaleMessages: 40, HistorySample: 10, DrainBacklog: 200,
		HTTPMessages: 20, HTTPWaiters: 50, ClusterMessages: 40,
		Logf: t.Logf,
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.DoubleCharges != 0 {
		t.Errorf("%d messages charged more than once", rep.DoubleCharges)
	}
	// The dev server's profile is taken where perf is installed (make
	// test-deps installs it) and may sample this user's processes (Debian's
	// kernel.perf_event_paranoid=3 refuses a user who is not root).
	if exec.Command("perf", "record", "-e", "cpu-clock", "-q", "-o", filepath.Join(t.TempDir(), "probe.perf"), "--", "true").Run() == nil { //nolint:gosec // fixed arguments, a temp file
		if p := rep.ServerProfile; p == nil || p.E2E["gRPC requests"] <= 0 || p.Floor["gRPC requests"] <= 0 {
			t.Errorf("perf is installed, but the dev server's profile found no gRPC requests: %+v", p)
		}
	}
	if c := rep.Cluster; c == nil || c.Result.Unique == 0 || c.CPUms["history"] <= 0 || c.TemporalCommits <= 0 || c.EffectivelyCommits <= 0 {
		t.Errorf("the cluster phase measured nothing: %+v", c)
	}
	if rep.Drain == nil || rep.Drain.Report == nil || rep.Drain.Report.Charges != 200 || rep.Drain.Report.DoubleCharges != 0 {
		t.Errorf("drain phase = %+v, want 200 charges, none twice", rep.Drain)
	}
	var drainRows int
	for _, tg := range rep.Targets {
		if strings.Contains(tg.What, "drain") || strings.Contains(tg.What, "fairness") || strings.Contains(tg.What, "after the outage") {
			drainRows++
		}
	}
	if drainRows != 3 {
		t.Errorf("the targets table has %d of the drain's 3 rows: %+v", drainRows, rep.Targets)
	}
	if rep.E2E.Unique != 70 || rep.E2E.Duplicates != 30 || rep.E2E.Messages != 100 {
		t.Errorf("e2e sent %d (%d unique, %d copies), want 100 (70, 30)", rep.E2E.Messages, rep.E2E.Unique, rep.E2E.Duplicates)
	}
	if rep.E2E.Suppressed < rep.E2E.Duplicates {
		t.Errorf("the inbox counted %d copies of %d", rep.E2E.Suppressed, rep.E2E.Duplicates)
	}
	// Every paid message was charged once and receipted; warm-up and
	// naive messages are charged too.
	if rep.Charges == 0 || rep.Emails == 0 {
		t.Errorf("the simulators saw %d charges and %d receipts", rep.Charges, rep.Emails)
	}
	if rep.Paced == nil {
		t.Fatal("no paced point")
	}
	runs := append(append([]Result{rep.Paid, rep.Naive, rep.Plain, *rep.Paced}, rep.Floors...), rep.E2ERounds...)
	runs = append(runs, rep.Sweep...)
	for _, r := range append(runs, rep.ScaleOut...) {
		if r.Throughput <= 0 || r.Latency.N == 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
			t.Errorf("%s: implausible result %+v", r.Name, r)
		}
	}
	if h := rep.HTTP; h == nil || h.MaxRate <= 0 || h.Paced.N != 20 || h.Paced.P50 > h.Paced.P99 || h.DuplicateRate <= 0 ||
		h.WaitersAnswered != 50 || h.GoroutinesDuring < h.GoroutinesBefore+50 {
		t.Errorf("HTTP phase: %+v", rep.HTTP)
	}
	if rep.Burst.Suppressed < rep.Burst.Copies || rep.Burst.Rate <= 0 {
		t.Errorf("duplicate burst: %+v", rep.Burst)
	}
	if rep.E2E.CPU.Worker <= 0 || rep.WorkerPeakRSSMB <= 0 {
		t.Errorf("worker resources not measured: CPU %.2fs, peak RSS %.1f MB", rep.E2E.CPU.Worker, rep.WorkerPeakRSSMB)
	}
	if len(rep.Targets) != 13 { // 9, and the drain's 4
		t.Errorf("%d targets evaluated, want 13", len(rep.Targets))
	}
	// The default series: floor, e2e, floor, e2e, floor, paired.
	if len(rep.Floors) != 3 || len(rep.E2ERounds) != 2 || len(rep.Rounds) != 2 || rep.RatioSpread.N != 2 {
		t.Errorf("series: %d floors, %d e2e runs, %d rounds, spread %+v", len(rep.Floors), len(rep.E2ERounds), len(rep.Rounds), rep.RatioSpread)
	}
	for i, x := range rep.Rounds {
		if x.Ratio <= 0 || x.E2ECPU <= 0 || x.FloorCPU <= 0 || x.Server <= 0 || x.FloorServer <= 0 {
			t.Errorf("round %d: %+v", i+1, x)
		}
	}
	if rep.RatioSpread.Min > rep.RatioSpread.Median || rep.RatioSpread.Median > rep.RatioSpread.Max || rep.E2EOverFloor != rep.RatioSpread.Median {
		t.Errorf("ratio spread %+v, e2e / floor %.2f", rep.RatioSpread, rep.E2EOverFloor)
	}
	if rep.CPUMeasure == "" {
		t.Error("the report does not say how CPU was measured")
	}
	for _, tg := range rep.Targets {
		if verdict(tg) == "N/A" {
			t.Errorf("target %q not measured: %s", tg.What, tg.Measured)
		}
	}
	checkCounts(t, rep)
	if len(rep.ScaleOut) != 2 || rep.ScaleOut[0].Workers != 1 || rep.ScaleOut[1].Workers != 2 {
		t.Errorf("scale-out: %d runs %+v", len(rep.ScaleOut), rep.ScaleOut)
	} else if rep.ScaleOut[1].CPU.Worker <= 0 || rep.ScaleOut[1].CPU.Server <= 0 {
		t.Errorf("scale-out with 2 workers: CPU not measured: %+v", rep.ScaleOut[1].CPU)
	}

	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	dir := t.TempDir()
	md, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "## Temporal actions, history events and Postgres commits per message", "StartWorkflowExecution",
		"## Where the CPU goes", "scale-out, 2 workers", "Temporal floor 3", "e2e 2", "## The floor and e2e interleaved", "median (min", "naive layout", "plain consumer", "double charges"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if !strings.Contains(string(text), "**PASS**") && !strings.Contains(string(text), "**MISS**") {
		t.Error("the report has no verdict")
	}
	f, err := os.Open(strings.TrimSuffix(md, ".md") + ".png")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 400 {
		t.Errorf("chart is %v", b)
	}
	if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(filepath.Base(md), ".md")+".json")); err != nil {
		t.Error(err)
	}
}

// checkCounts checks the counted phases: present, and exact where the right
// value is known whatever the workflow's shape.
func checkCounts(t *testing.T, rep Report) {
	t.Helper()
	for _, x := range []struct {
		name  string
		c     *Costs
		units int
	}{{"paid", rep.Paid.Costs, rep.Paid.Unique}, {"e2e", rep.E2E.Costs, rep.E2E.Unique}, {"floor", rep.Floor.Costs, rep.Floor.Unique},
		{"floor after", rep.FloorEnd.Costs, rep.FloorEnd.Unique}, {"burst", rep.Burst.Costs, rep.Burst.Copies}, {"plain", rep.Plain.Costs, rep.Plain.Messages}} {
		if x.c == nil || !x.c.ActionsMeasured() || !x.c.CommitsMeasured() {
			t.Fatalf("%s: counts missing: %+v", x.name, x.c)
		}
		if x.c.Units != x.units || x.units == 0 {
			t.Errorf("%s: counted over %d units, want %d", x.name, x.c.Units, x.units)
		}
	}
	// The floor's workflow is a start and one workflow task with two
	// local activities' markers: exactly 2 actions.
	for _, f := range []*Costs{rep.Floor.Costs, rep.FloorEnd.Costs} {
		if n := float64(f.Units); f.Actions["grpc_StartWorkflowExecution"] != n || f.Actions["command_BatchMarkers"] != n || f.ActionsTotal() != 2*n {
			t.Errorf("floor: actions %v for %d workflows, want one start and one marker batch each", f.Actions, f.Units)
		}
		if f.HistorySample == 0 || f.HistoryEvents < 5 {
			t.Errorf("floor: history events %.1f over %d workflows", f.HistoryEvents, f.HistorySample)
		}
	}
	// Each paid message starts one workflow, and costs at least the
	// floor's actions.
	p := rep.Paid.Costs
	if p.Actions["grpc_StartWorkflowExecution"] != float64(p.Units) || p.ActionsPer() < 2 {
		t.Errorf("paid: actions %v for %d messages", p.Actions, p.Units)
	}
	if p.HistorySample == 0 || p.HistoryEvents < 5 {
		t.Errorf("paid: history events %.1f over %d workflows", p.HistoryEvents, p.HistorySample)
	}
	var byShape float64
	for _, v := range p.CommitsByShape {
		byShape += v
	}
	if byShape != p.Commits {
		t.Errorf("paid: commits by shape %v do not add up to %.0f", p.CommitsByShape, p.Commits)
	}
	if n := p.CommitsByShape["connect"]; n > 0 {
		// The pool grows when the phase runs more effects at once than the
		// warm-up did (a loaded machine): counted, not an error.
		t.Logf("paid: %.0f connections opened during the phase", n)
	}
	// A paid message creates and confirms one PaymentIntent and sends one
	// receipt; Search is never read after a write.
	if pr := p.ProviderRequests; pr["stripe create"] != float64(p.Units) || pr["stripe confirm"] != float64(p.Units) ||
		pr["sendgrid send"] != float64(p.Units) || pr["stripe search"] != 0 {
		t.Errorf("paid: provider requests %v for %d messages", pr, p.Units)
	}
	// A copy never starts a workflow.
	if b := rep.Burst.Costs; b.Actions["grpc_StartWorkflowExecution"] != 0 {
		t.Errorf("burst: actions %v", b.Actions)
	}
	// Every unique message commits at least its inbox row and its record.
	if e := rep.E2E.Costs.CommitsPer(); e < 2 || e > 30 {
		t.Errorf("e2e: %.2f commits per unique message", e)
	}
	// Postgres's own count over the whole run is read, and the proxies
	// never count a transaction Postgres did not. (Postgres can count more:
	// its own work on the database, which no proxy sees.)
	if cc := rep.CommitCheck; cc == nil || cc.XactCommit <= 0 {
		t.Errorf("no commit cross-check: %+v", cc)
	} else if d := cc.Difference(); d < -0.01 {
		t.Errorf("xact_commit %.0f, counted %.0f + %.0f: %.1f%% apart", cc.XactCommit, cc.Proxy, cc.Harness, d*100)
	}
	// The plain consumer commits once per message; with the worker's
	// background commits over the interval taken out, that is what the
	// count must show.
	bg, ok := rep.backgroundCommits()
	if !ok {
		t.Fatal("no background commit rate")
	}
	pc := rep.Plain.Costs
	if got := (pc.Commits - bg*pc.Interval.Seconds()) / float64(pc.Units); got < 0.97 || got > 1.05 {
		t.Errorf("plain: %.3f commits per message after %.1f/s of background over %s (raw %.0f for %d), want 1",
			got, bg, pc.Interval, pc.Commits, pc.Units)
	}
}
