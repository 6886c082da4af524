package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

type row struct {
	name, inflight, sent, unique, copies, elapsed, rate, dupRate, p50, p90, p99, pmax, worker, server, pg, nats, other, busy string
}

func fmtMS(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	v := ms(d)
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRate(v float64) string {
	if v == 0 {
		return "-"
	}
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func resultRow(r Result, name string) row {
	inflight := fmt.Sprint(r.InFlight)
	if r.TargetRate > 0 {
		inflight = fmt.Sprintf("paced %.0f/s", r.TargetRate)
	}
	copies := "-"
	if r.Duplicates > 0 {
		copies = fmt.Sprintf("%d/%d", r.Suppressed, r.Duplicates)
	}
	return row{
		name: name, inflight: inflight, sent: fmt.Sprint(r.Messages), unique: fmt.Sprint(r.Unique), copies: copies,
		elapsed: r.Elapsed.Round(10 * time.Millisecond).String(), rate: fmtRate(r.Throughput), dupRate: fmtRate(r.DuplicateRate),
		p50: fmtMS(r.Latency.P50), p90: fmtMS(r.Latency.P90), p99: fmtMS(r.Latency.P99), pmax: fmtMS(r.Latency.Max),
		worker: fmt.Sprintf("%.1f", r.CPU.Worker), server: fmt.Sprintf("%.1f", r.CPU.Server),
		pg: fmt.Sprintf("%.1f", r.CPU.Postgres), nats: fmt.Sprintf("%.1f", r.CPU.NATS), other: fmt.Sprintf("%.1f", r.CPU.Other),
		busy: fmt.Sprintf("%.0f%%", r.CPU.MachineBusy*100),
	}
}

func (r Report) rows() []row {
	rows := []row{resultRow(r.E2E, "e2e (JetStream -> worker -> effects)")}
	rows = append(rows, row{
		name: "duplicate burst (copies only)", inflight: "async", sent: fmt.Sprint(r.Burst.Copies), unique: "0",
		copies: fmt.Sprintf("%d/%d", r.Burst.Suppressed, r.Burst.Copies), elapsed: r.Burst.Elapsed.Round(10 * time.Millisecond).String(),
		rate: "-", dupRate: fmtRate(r.Burst.Rate), p50: "-", p90: "-", p99: "-", pmax: "-",
		worker: fmt.Sprintf("%.1f", r.Burst.CPU.Worker), server: fmt.Sprintf("%.1f", r.Burst.CPU.Server),
		pg: fmt.Sprintf("%.1f", r.Burst.CPU.Postgres), nats: fmt.Sprintf("%.1f", r.Burst.CPU.NATS), other: fmt.Sprintf("%.1f", r.Burst.CPU.Other),
		busy: fmt.Sprintf("%.0f%%", r.Burst.CPU.MachineBusy*100),
	})
	for _, s := range r.Sweep {
		rows = append(rows, resultRow(s, fmt.Sprintf("e2e sweep, in-flight %d", s.InFlight)))
	}
	if r.HalfRate != nil {
		rows = append(rows, resultRow(*r.HalfRate, "e2e at half the max rate"))
	}
	rows = append(rows,
		resultRow(r.Floor, "Temporal floor (eager + 2 local no-ops)"),
		resultRow(r.Naive, "naive layout (2 regular activities)"),
		resultRow(r.FloorEnd, "Temporal floor, again after the e2e runs"),
		resultRow(r.Plain, "plain consumer (1 tx/msg, no Temporal)"),
	)
	return rows
}

var header = row{"approach", "in-flight", "sent", "unique", "copies suppr./sent", "time", "unique/s", "copies/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "worker CPU s", "server CPU s", "pg CPU s", "nats CPU s", "other CPU s", "machine busy"}

func (x row) cells() []string {
	return []string{x.name, x.inflight, x.sent, x.unique, x.copies, x.elapsed, x.rate, x.dupRate, x.p50, x.p90, x.p99, x.pmax, x.worker, x.server, x.pg, x.nats, x.other, x.busy}
}

// WriteTable prints the results, the ratios and the targets as text.
func (r Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, x := range append([]row{header}, r.rows()...) {
		fmt.Fprintln(tw, strings.Join(x.cells(), "\t")+"\t")
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nworker peak RSS %.1f MB; charges %d, double charges %d (must be 0); receipts %d, duplicate receipts %d\n",
		r.WorkerPeakRSSMB, r.Charges, r.DoubleCharges, r.Emails, r.DuplicateEmails)
	fmt.Fprintf(w, "ratios: e2e/floor %.2f, e2e/naive %.2f, duplicate suppression/plain consumer %.2f; max e2e rate %.1f/s\n",
		r.E2EOverFloor, r.E2EOverNaive, r.BurstOverPlain, r.MaxRate)
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  %-4s %s %s: %s\n", verdict(t), t.What, t.Want, t.Measured)
	}
}

func verdict(t Target) string {
	switch {
	case strings.HasPrefix(t.Measured, "not measured"):
		return "N/A"
	case t.Met:
		return "PASS"
	}
	return "MISS"
}

// Markdown renders the report; chart names the PNG beside it ("" for none).
func (r Report) Markdown(chart string) string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "# effectively benchmark, %s\n\n", r.Started.Format("2006-01-02 15:04:05 MST"))
	b.WriteString("Measured by `tools/bench` (`go run ./tools/bench/cmd/bench`). Every number below was measured in this run; nothing is estimated or carried over.\n\n")
	b.WriteString("## Environment\n\n")
	e := r.Environment
	fmt.Fprintf(&b, "- machine: %s, %d CPUs, %d MB memory (%s)\n", e.CPUModel, e.CPUs, e.MemoryMB, e.OS)
	fmt.Fprintf(&b, "- %s; %s; PostgreSQL %s; %s\n", e.Temporal, e.NATS, e.Postgres, e.GoVersion)
	fmt.Fprintf(&b, "- load before the run: %.0f%% of the CPUs busy over 2 s, 1-minute load average %s\n", e.BackgroundBusy*100, e.LoadAverage)
	b.WriteString("- every component on this machine: the dev server (1 task-queue partition), Postgres, NATS, the worker process, and this harness (simulators, publisher, poller, the reference points' workers)\n\n")
	b.WriteString("## Configuration\n\n")
	fmt.Fprintf(&b, "- e2e: %d messages published, %.0f%% of them copies of an earlier message (published without `Nats-Msg-Id`, so the broker passes them to the consumer), %.0f%% of the unique ones with a declined card; in-flight limit %d unique messages unrecorded\n",
		c.Messages, c.DuplicateRatio*100, c.DeclineRatio*100, c.InFlight)
	fmt.Fprintf(&b, "- provider simulators answer after %s (Stripe and SendGrid each); seed %d\n", c.Latency, c.Seed)
	fmt.Fprintf(&b, "- sweep: in-flight %v, %d messages each; then an open-loop point paced at half the highest rate measured\n", c.Sweep, c.SweepMessages)
	fmt.Fprintf(&b, "- duplicate burst: %d copies; floor: %d workflows; naive: %d workflows; plain consumer: %d messages on %d connections\n",
		c.DuplicateBurst, c.FloorWorkflows, c.NaiveWorkflows, c.PlainMessages, c.PlainClients)
	fmt.Fprintf(&b, "- completion poll every %s; warm-up %d messages per path, not counted; gRPC compression of every Temporal client (the worker's and the reference points'): %s\n", c.Poll, c.Warmup, c.GrpcCompression)
	if len(c.WorkerEnv) > 0 {
		fmt.Fprintf(&b, "- worker environment additions: `%s`\n", strings.Join(c.WorkerEnv, " "))
	}
	fmt.Fprintf(&b, "- the whole run took %s\n\n", r.Elapsed.Round(time.Second))

	b.WriteString("## The fast paths this build runs\n\n")
	b.WriteString("- **eager start**: the worker's intake starts each workflow with `EnableEagerStart` on the client its worker polls with, so the first workflow task comes back in the start's answer;\n")
	b.WriteString("- **local activities first**: each effect runs once as a local activity (`ChargeOrderLocally`, `SendReceiptLocally`) inside that task, and as a regular activity only when that attempt fails or times out; a paid message's history is 9 events;\n")
	b.WriteString("- **one statement per ledger step**: the first payment claim, the receipt claim and both records are single statements (the processed row still commits with the state change);\n")
	b.WriteString("- **intake**: a continuous pull, 16 concurrent delivery handlers, a plain ack after the inbox commit, a copy's counter committed without waiting for the WAL flush, 32 fast-path starters without row locks, copies of a pending row left alone;\n")
	b.WriteString("- the measured effect of each, run against run, is in CHANGELOG.md (Performance history); this report measures the build as it is.\n\n")
	b.WriteString("## Results\n\n")
	h := header.cells()
	b.WriteString("| " + strings.Join(h, " | ") + " |\n|" + strings.Repeat("---|", len(h)) + "\n")
	for _, x := range r.rows() {
		b.WriteString("| " + strings.Join(x.cells(), " | ") + " |\n")
	}
	fmt.Fprintf(&b, "\nWorker peak RSS (VmHWM): **%.1f MB**. Stripe simulator: %d charges, **%d double charges**; SendGrid simulator: %d receipts, %d beyond one per message.\n\n",
		r.WorkerPeakRSSMB, r.Charges, r.DoubleCharges, r.Emails, r.DuplicateEmails)
	if chart != "" {
		fmt.Fprintf(&b, "![throughput per approach and the sweep's latency](%s)\n\n", chart)
	}

	b.WriteString("## Ratios and the issue's targets\n\n| target | wanted | measured | |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** |\n", t.What, t.Want, t.Measured, verdict(t))
	}
	b.WriteString(r.cpuSection())
	b.WriteString(r.stageSection())

	b.WriteString("\n## How it was measured\n\n")
	b.WriteString("- **e2e**: each unique message is published to a fresh JetStream stream with `Nats-Msg-Id` = its ID; one real worker process (the `./worker` binary, built for the run) consumes it, records it in the inbox, starts its workflow, charges through stripe-go and mails through sendgrid-go against the simulators, and records everything in a fresh Postgres database. A message is done when its `processed_messages` row exists and, when paid, its order's receipt reached a final state. The harness counts those with one query per poll; the in-flight limit is enforced on that count, so at small limits the poll interval itself costs throughput (about half an interval per message).\n")
	b.WriteString("- **latency**: from just before the publish call to `greatest(processed_at, orders.updated_at)`, the `now()` of the transaction that recorded the last effect (its start, a little before its commit), moved to the harness's clock by an offset measured with `clock_timestamp()` round trips (shortest of 7). Negative values are clamped to 0.\n")
	b.WriteString("- **throughput**: unique messages divided by the time from the first publish to the last recorded effect. Copies are not counted as throughput; `copies/s` is the inbox's duplicates counter over the same time, which is bounded by how fast copies were published, not a capacity.\n")
	b.WriteString("- **duplicate burst**: copies of already recorded messages published back to back (async, no `Nats-Msg-Id`); the rate is copies counted by the inbox (`sum(inbox.duplicates)`, polled every 10 ms) divided by the time from the first publish — this is the capacity compared with the plain consumer.\n")
	b.WriteString("- **Temporal floor**: a bench-only workflow with two no-op local activities, started with `EnableEagerStart` from the client its worker uses, in the harness process; latency is start to result.\n")
	b.WriteString("- **naive layout**: a bench-only workflow with two regular activities (`StartToCloseTimeout` 1 m, default retry policy) that charge and mail through the same clients, simulators and keys and record with plain SQL; its worker runs in the harness process and the workflows are started from a second client (no eager start); latency is start to result.\n")
	b.WriteString("- **plain consumer**: per message one transaction — `INSERT INTO processed_messages … ON CONFLICT DO NOTHING`, and for a new message an upsert of its order row — with the same share of copies, on a pool of connections, no broker and no Temporal; its rate counts every message (copies included): its insert rate.\n")
	b.WriteString("- **CPU**: user+system seconds from `/proc/<pid>/stat` of the worker process, the dev server, the harness, every `postgres` process (the server and its per-connection backends) and `nats-server`, sampled at the start and end of each phase; `other` is the rest of the machine's busy time meanwhile (`/proc/stat`): the kernel's own work and anything else that ran; `machine busy` is the share of both CPUs busy, everything included. Peak RSS is the worker's `VmHWM` at the end of the run.\n")

	b.WriteString("\n## Notes\n\n")
	for _, n := range r.notes() {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// notes are the honest remarks that follow from the numbers.
func (r Report) notes() []string {
	var n []string
	if bg := r.Environment.BackgroundBusy; bg > 0.15 {
		n = append(n, fmt.Sprintf("**The machine was not idle**: %.0f%% of the CPUs were busy during the 2 s before the run (load average %s). Other work shared the CPUs during the run too (see `other CPU s`), so these figures are lower than this machine gives when idle; rerun on a quiet machine before drawing conclusions.", bg*100, r.Environment.LoadAverage))
	} else {
		n = append(n, fmt.Sprintf("The machine was quiet before the run: %.0f%% of the CPUs busy over 2 s (load average %s).", bg*100, r.Environment.LoadAverage))
	}
	n = append(n, "All components share 2 CPUs: the harness (simulators, publisher, poller, reference workers), the dev server, Postgres, NATS and the worker compete with each other, so every figure is for this whole machine, not for the worker alone.")
	if r.E2E.CPU.MachineBusy > 0.9 {
		n = append(n, fmt.Sprintf("During the e2e run the machine was %.0f%% busy (worker %.1f s, dev server %.1f s, harness %.1f s of CPU over %s): the run is CPU-bound.",
			r.E2E.CPU.MachineBusy*100, r.E2E.CPU.Worker, r.E2E.CPU.Server, r.E2E.CPU.Harness, r.E2E.Elapsed.Round(time.Millisecond)))
	} else {
		n = append(n, fmt.Sprintf("During the e2e run the machine was %.0f%% busy (worker %.1f s, dev server %.1f s, harness %.1f s of CPU over %s): the run is latency-bound, not CPU-bound.",
			r.E2E.CPU.MachineBusy*100, r.E2E.CPU.Worker, r.E2E.CPU.Server, r.E2E.CPU.Harness, r.E2E.Elapsed.Round(time.Millisecond)))
	}
	if u := float64(r.E2E.Unique); u > 0 {
		c := r.E2E.CPU
		n = append(n, fmt.Sprintf("CPU per unique e2e message: worker %.1f ms, dev server %.1f ms, harness %.1f ms, Postgres %.1f ms, NATS %.1f ms, other %.1f ms. For comparison, the floor cost the dev server %.1f ms per workflow and the naive layout %.1f ms.",
			c.Worker/u*1000, c.Server/u*1000, c.Harness/u*1000, c.Postgres/u*1000, c.NATS/u*1000, c.Other/u*1000,
			perUnit(r.Floor.CPU.Server, r.Floor.Unique), perUnit(r.Naive.CPU.Server, r.Naive.Unique)))
		if c.Server > c.Worker {
			n = append(n, fmt.Sprintf("The dev server used more CPU than the worker during the e2e run (%.1f s against %.1f s): per message the Temporal server, not the worker's own code, is the larger cost on this machine. The e2e path cost the server %.1f× what the floor's shape does per workflow.",
				c.Server, c.Worker, ratio(c.Server/u, r.Floor.CPU.Server/math.Max(1, float64(r.Floor.Unique)))))
		}
	}
	if r.E2E.Suppressed != r.E2E.Duplicates {
		n = append(n, fmt.Sprintf("The inbox counted %d copies where %d were published (a redelivery counts as one more copy; a shortfall means copies were still in flight when the wait ended).", r.E2E.Suppressed, r.E2E.Duplicates))
	}
	if r.Floor.Throughput > 0 && r.FloorEnd.Throughput > 0 {
		drift := (r.FloorEnd.Throughput/r.Floor.Throughput - 1) * 100
		what := fmt.Sprintf("no material drift of the dev server over the run (%+.0f%%)", drift)
		if drift < -10 {
			what = fmt.Sprintf("the dev server slowed down as workflows accumulated (%+.0f%%): the ratios use the first floor and the naive layout measured on the fresh server, so they are, if anything, unfavourable to the e2e path", drift)
		} else if drift > 10 {
			what = fmt.Sprintf("the floor was faster at the end (%+.0f%%): other load early in the run, or warm-up; compare the e2e with both", drift)
		}
		n = append(n, fmt.Sprintf("Order of the phases: floor, naive layout, e2e, duplicate burst, sweep, half-rate point, floor again, plain consumer. The floor ran %.1f/s first and %.1f/s at the end: %s.",
			r.Floor.Throughput, r.FloorEnd.Throughput, what))
	}
	if len(r.WorkerWarnings) == 0 {
		n = append(n, "The worker logged no warning and no error during the run.")
	}
	for _, w := range r.WorkerWarnings {
		n = append(n, fmt.Sprintf("The worker logged %d× at %s: %q (first: `%s`).", w.Count, w.Level, w.Msg, w.Example))
	}
	n = append(n, "The floor and the naive layout run their workers inside the harness process, so their CPU shows under the harness; the e2e worker is a separate process.")
	n = append(n, "This run measures the code as it is; it changes no setting of the worker unless the configuration lists worker environment additions.")
	return n
}

// cpuSection renders where the CPU went, per unique message, for the e2e
// path and the reference points, and the worker's profile.
func (r Report) cpuSection() string {
	var b strings.Builder
	b.WriteString("\n## Where the CPU goes\n\n")
	b.WriteString("CPU milliseconds per unique message (per workflow for the floor and the naive layout), by process, over each phase. With every process on the same 2 CPUs, `2000 / total` bounds the rate when the run is CPU-bound.\n\n")
	b.WriteString("| approach | dev server | worker | harness | Postgres | NATS | other | total | bound (2 CPUs) | measured |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range []struct {
		name string
		r    Result
	}{{"e2e", r.E2E}, {"Temporal floor", r.Floor}, {"naive layout", r.Naive}, {"plain consumer (per message sent)", r.Plain}} {
		n := x.r.Unique
		if x.name == "plain consumer (per message sent)" {
			n = x.r.Messages
		}
		if n == 0 {
			continue
		}
		c := x.r.CPU
		total := c.Server + c.Worker + c.Harness + c.Postgres + c.NATS + c.Other
		bound := "-"
		if total > 0 {
			bound = fmt.Sprintf("%.0f/s", float64(n)/total*float64(max(1, r.Environment.CPUs)))
		}
		per := func(v float64) string { return fmt.Sprintf("%.1f", perUnit(v, n)) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | **%s** | %s | %s/s |\n", x.name,
			per(c.Server), per(c.Worker), per(c.Harness), per(c.Postgres), per(c.NATS), per(c.Other), per(total), bound, fmtRate(x.r.Throughput))
	}
	b.WriteString("\nThe floor's workers run in the harness, so its worker cost shows under `harness`; the e2e path's harness cost is the simulators, the publisher and the poller.\n")
	if r.WorkerProfileTop != "" {
		fmt.Fprintf(&b, "\n### The worker's CPU profile\n\n%s, taken during the e2e run (`go tool pprof -top`, the first entries; the profile is `%s` beside this report):\n\n```\n%s\n```\n",
			r.WorkerProfileWhat, r.WorkerProfileFile, strings.TrimSpace(r.WorkerProfileTop))
	}
	return b.String()
}

// stageSection splits the e2e runs' latency at the inbox row's
// timestamps.
func (r Report) stageSection() string {
	var b strings.Builder
	b.WriteString("\n## Where the latency goes\n\n")
	b.WriteString("Per message, split at its inbox row: **publish call** the harness's publish until JetStream's ack (part of intake), **intake** from the publish to the inbox insert (broker, fetch, handler), **start** from the insert to the row marked dispatched after its workflow start (the fast path; a row left to the dispatcher waits 2 s or more), **effects** from that mark to the last effect recorded (the workflow runs while the mark is made, so this can be 0). Milliseconds, p50 / p99 / max.\n\n")
	b.WriteString("| run | publish call | intake | start | effects | whole |\n|---|---|---|---|---|---|\n")
	cell := func(l Latency) string { return fmt.Sprintf("%s / %s / %s", fmtMS(l.P50), fmtMS(l.P99), fmtMS(l.Max)) }
	runs := []Result{r.E2E}
	runs = append(runs, r.Sweep...)
	if r.HalfRate != nil {
		runs = append(runs, *r.HalfRate)
	}
	for _, x := range runs {
		if x.Stages == nil {
			continue
		}
		name := fmt.Sprintf("in-flight %d", x.InFlight)
		if x.TargetRate > 0 {
			name = fmt.Sprintf("paced %.0f/s", x.TargetRate)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", name, cell(x.Stages.Publish), cell(x.Stages.Intake), cell(x.Stages.Start), cell(x.Stages.Effects), cell(x.Latency))
	}
	return b.String()
}

func perUnit(sec float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return sec / float64(n) * 1000
}

// WriteFiles writes results/bench-<timestamp>.md, .png and .json into dir
// and returns the markdown's path.
func (r Report) WriteFiles(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	base := "bench-" + r.Started.Format("20060102-150405")
	pngBytes, err := r.Chart()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, base+".png"), pngBytes, 0o644); err != nil { //nolint:gosec // a report, meant to be read
		return "", err
	}
	if len(r.WorkerProfile) > 0 {
		r.WorkerProfileFile = base + "-worker-cpu.pprof"
		path := filepath.Join(dir, r.WorkerProfileFile)
		if err := os.WriteFile(path, r.WorkerProfile, 0o644); err != nil { //nolint:gosec // a report, meant to be read
			return "", err
		}
		r.WorkerProfileTop = pprofTop(path)
	}
	md := filepath.Join(dir, base+".md")
	if err := os.WriteFile(md, []byte(r.Markdown(base+".png")), 0o644); err != nil { //nolint:gosec // a report, meant to be read
		return "", err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, base+".json"), js, 0o644); err != nil { //nolint:gosec // a report, meant to be read
		return "", err
	}
	return md, nil
}

// pprofTop is the first lines of `go tool pprof -top` of the profile at
// path, or a line saying why there are none.
func pprofTop(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof failed: %v\n%s", err, out)
	}
	return string(out)
}
