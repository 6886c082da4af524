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

// row is one line of the throughput table.
type row struct {
	name, inflight, workers, unique, copies, rate, p50, p99, pmax, busy string
}

var header = row{"run", "in-flight", "workers", "unique", "copies suppr./sent", "per s", "p50 ms", "p99 ms", "max ms", "machine busy"}

func (x row) cells() []string {
	return []string{x.name, x.inflight, x.workers, x.unique, x.copies, x.rate, x.p50, x.p99, x.pmax, x.busy}
}

func resultRow(r Result, name string) row {
	inflight := fmt.Sprint(r.InFlight)
	if r.TargetRate > 0 {
		inflight = fmt.Sprintf("paced %.0f/s", r.TargetRate)
	}
	copies, workers := "-", "-"
	if r.Duplicates > 0 {
		copies = fmt.Sprintf("%d/%d", r.Suppressed, r.Duplicates)
	}
	if r.Workers > 0 {
		workers = fmt.Sprint(r.Workers)
	}
	return row{
		name: name, inflight: inflight, workers: workers, unique: fmt.Sprint(r.Unique), copies: copies, rate: fmtRate(r.Throughput),
		p50: fmtMS(r.Latency.P50), p99: fmtMS(r.Latency.P99), pmax: fmtMS(r.Latency.Max), busy: fmt.Sprintf("%.0f%%", r.CPU.MachineBusy*100),
	}
}

// rows are the throughput table: the e2e run between its two floors, the
// other reference points, the sweep, the paced point and the scale-out.
func (r Report) rows() []row {
	var rows []row
	floors, e2es := r.series()
	for i, f := range floors {
		rows = append(rows, resultRow(f, fmt.Sprintf("Temporal floor %d", i+1)))
		if i < len(e2es) {
			e2e := resultRow(e2es[i], fmt.Sprintf("e2e %d (JetStream → worker → effects)", i+1))
			e2e.workers = "1"
			rows = append(rows, e2e)
		}
	}
	rows = append(rows,
		resultRow(r.Paid, "e2e, paid messages only"),
		resultRow(r.Naive, "naive layout (2 regular activities)"),
		resultRow(r.Plain, "plain consumer (msgs/s, copies incl.)"),
		row{
			name: "duplicate burst (copies/s)", inflight: "async", workers: "1", unique: "0",
			copies: fmt.Sprintf("%d/%d", r.Burst.Suppressed, r.Burst.Copies), rate: fmtRate(r.Burst.Rate),
			p50: "-", p99: "-", pmax: "-", busy: fmt.Sprintf("%.0f%%", r.Burst.CPU.MachineBusy*100),
		},
	)
	for _, s := range r.Sweep {
		x := resultRow(s, fmt.Sprintf("sweep, in-flight %d", s.InFlight))
		x.workers = "1"
		rows = append(rows, x)
	}
	if r.Paced != nil {
		x := resultRow(*r.Paced, fmt.Sprintf("paced at %.0f%% of the sweep's best rate", pacedShare*100))
		x.workers = "1"
		rows = append(rows, x)
	}
	for _, s := range r.ScaleOut {
		rows = append(rows, resultRow(s, fmt.Sprintf("scale-out, %d workers", s.Workers)))
	}
	return rows
}

// series is the floors and e2e runs in the order they ran: Floors and
// E2ERounds, or for a report from before the series Floor, E2E, FloorEnd.
func (r Report) series() (floors, e2es []Result) {
	if len(r.Floors) > 0 {
		return r.Floors, r.E2ERounds
	}
	return []Result{r.Floor, r.FloorEnd}, []Result{r.E2E}
}

// WriteTable prints the results, the targets and the counts as text.
func (r Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, x := range append([]row{header}, r.rows()...) {
		fmt.Fprintln(tw, strings.Join(x.cells(), "\t")+"\t")
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\ncounts per unit (they do not depend on load):")
	for _, c := range r.costRows() {
		fmt.Fprintf(w, "  %-34s per %-14s actions %-5s history events %-5s commits %s  [%s]\n", c.name, c.costs.Unit, fmtPer(c.costs.ActionsPer(), c.costs.ActionsMeasured()),
			fmtEvents(c.costs), fmtPer(c.costs.CommitsPer(), c.costs.CommitsMeasured()), c.costs.ActionsByType())
	}
	fmt.Fprintln(w, "\nwhat each unit asked of the dev server (history bytes; frontend and persistence requests, at least 0.05 per unit):")
	for _, c := range r.costRows() {
		if c.costs != nil && c.costs.ServerRequests != nil {
			fmt.Fprintf(w, "  %-34s per %-14s history %s B; %s\n", c.name, c.costs.Unit, fmtBytes(c.costs), c.costs.ServerRequestsText())
		}
	}
	if p := r.ServerProfile; p != nil {
		fmt.Fprintln(w, "\nthe dev server's samples under each part of its work, e2e 1 / floor 2 (perf, children included):")
		for _, c := range ServerComponents {
			fmt.Fprintf(w, "  %-32s %5.1f%% / %5.1f%%\n", c.Name, p.E2E[c.Name], p.Floor[c.Name])
		}
	}
	fmt.Fprintf(w, "\nratios: e2e / floor beside it %s, e2e / naive %.2f, duplicate suppression / plain consumer %.2f; the sweep's best rate %.1f/s\n",
		r.RatioSpread, r.E2EOverNaive, r.BurstOverPlain, r.MaxRate)
	for i, x := range r.Rounds {
		fmt.Fprintf(w, "  round %d: e2e %.1f/s over floors %.1f and %.1f/s: %.2f×; CPU ms per message e2e %.1f (worker %.1f, dev server %.1f) over the floors' %.1f (dev server %.1f): %.2f×%s\n",
			i+1, x.E2E, x.FloorBefore, x.FloorAfter, x.Ratio, x.E2ECPU, x.Worker, x.Server, x.FloorCPU, x.FloorServer, x.CPURatio, x.instrText())
	}
	if r.CPUMeasure != "" {
		fmt.Fprintf(w, "  CPU measured as %s\n", r.CPUMeasure)
	}
	if k := r.kneeText(); k != "" {
		fmt.Fprintf(w, "  %s\n", k)
	}
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  %-4s %s %s: %s\n", verdict(t), t.What, t.Want, t.Measured)
	}
}

// instrText is the round's instructions, where perf counted them.
func (x Round) instrText() string {
	if x.InstrRatio == 0 {
		return ""
	}
	return fmt.Sprintf("; instructions per message %.3g over %.3g: %.2f×", x.E2EInstr, x.FloorInstr, x.InstrRatio)
}

// roundsSection renders the interleaved series pair by pair.
func (r Report) roundsSection() string {
	if len(r.Rounds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## The floor and e2e interleaved\n\n")
	fmt.Fprintf(&b, "Floor and e2e runs alternate (floor 1, e2e 1, floor 2, …), and each e2e run is divided by the mean of the floors right before and right after it, so that a drift of the machine's speed moves both sides of a ratio. CPU per message is measured as %s. CPU milliseconds per unique message (e2e) and per workflow (floor) are those of the run's own processes (the CPU table's total less `other`, which is other tenants' work).\n\n", r.CPUMeasure)
	instr := r.InstrRatioSpread.N > 0
	b.WriteString("| round | floor before /s | e2e /s | floor after /s | ratio | e2e CPU ms | worker | dev server | floor CPU ms | floor's dev server | CPU ratio | dev server ratio |")
	if instr {
		b.WriteString(" e2e instructions | floor instructions | instructions ratio |")
	}
	b.WriteString("\n|" + strings.Repeat("---|", 12))
	if instr {
		b.WriteString(strings.Repeat("---|", 3))
	}
	b.WriteString("\n")
	for i, x := range r.Rounds {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.1f | **%.2f×** | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f× | %.2f× |", i+1, x.FloorBefore, x.E2E, x.FloorAfter, x.Ratio,
			x.E2ECPU, x.Worker, x.Server, x.FloorCPU, x.FloorServer, x.CPURatio, ratio(x.Server, x.FloorServer))
		if instr {
			fmt.Fprintf(&b, " %.3g | %.3g | %.2f× |", x.E2EInstr, x.FloorInstr, x.InstrRatio)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\nRatio of the rates: %s. Ratio of the CPU per message: %s.", r.RatioSpread, r.CPURatioSpread)
	if instr {
		fmt.Fprintf(&b, " Ratio of the instructions per message: %s.", r.InstrRatioSpread)
	}
	b.WriteString("\n")
	return b.String()
}

func fmtPer(v float64, measured bool) string {
	if !measured {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtEvents(c *Costs) string {
	if c == nil || c.HistorySample == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", c.HistoryEvents)
}

func fmtBytes(c *Costs) string {
	if c == nil || c.HistorySample == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", c.HistoryBytes)
}

type costRow struct {
	name  string
	costs *Costs
}

// costRows are the counted phases, in the report's order.
func (r Report) costRows() []costRow {
	var out []costRow
	for _, c := range []costRow{
		{"e2e, paid messages only", r.Paid.Costs},
		{"e2e (copies and declines included)", r.E2E.Costs},
		{"duplicate burst (copies only)", r.Burst.Costs},
		{"Temporal floor, first", r.Floor.Costs},
		{"Temporal floor, last", r.FloorEnd.Costs},
		{"plain consumer", r.Plain.Costs},
	} {
		if c.costs != nil {
			out = append(out, c)
		}
	}
	return out
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
	c, e := r.Config, r.Environment
	fmt.Fprintf(&b, "# effectively benchmark, %s\n\n", r.Started.Format("2006-01-02 15:04:05 MST"))
	commit := e.Commit
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(&b, "Commit `%s`, measured by `lab/bench` (`go run ./lab/bench/cmd/bench`); every number below was measured in this run. "+
		"%s, %d CPUs, %d MB; %s; %s; PostgreSQL %s; %s. Load before the run: %.0f%% of the CPUs busy, load average %s. The whole run took %s.\n\n",
		commit, e.CPUModel, e.CPUs, e.MemoryMB, e.Temporal, e.NATS, e.Postgres, e.GoVersion, e.BackgroundBusy*100, e.LoadAverage, r.Elapsed.Round(time.Second))
	if e.CPULayout != "" {
		fmt.Fprintf(&b, "CPUs (`-temporal-cpus %s`): %s.\n\n", c.TemporalCPUs, e.CPULayout)
	}
	fmt.Fprintf(&b, "e2e: %d rounds of %d messages, %.0f%% copies, %.0f%% declines, in-flight %d, gRPC compression %s; paid-only run %d messages; floor %d workflows; naive %d; plain consumer %d messages on %d connections; "+
		"duplicate burst %d copies; sweep %v × %d messages; scale-out %v workers × %d messages; simulators answer in %s; seed %d.",
		max(1, c.Rounds), c.Messages, c.DuplicateRatio*100, c.DeclineRatio*100, c.InFlight, c.GrpcCompression, c.PaidMessages, c.FloorWorkflows, c.NaiveWorkflows, c.PlainMessages, c.PlainClients,
		c.DuplicateBurst, c.Sweep, c.SweepMessages, c.Workers, c.ScaleMessages, c.Latency, c.Seed)
	if len(c.WorkerEnv) > 0 {
		fmt.Fprintf(&b, " Worker environment additions: `%s`.", strings.Join(c.WorkerEnv, " "))
	}
	b.WriteString("\n\n## Targets\n\n| target | wanted | measured | |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %s | %s | **%s** |\n", t.What, t.Want, t.Measured, verdict(t))
	}
	b.WriteString(r.holdsSection())
	b.WriteString(r.roundsSection())
	b.WriteString(r.costSection())
	b.WriteString(r.serverProfileSection())
	b.WriteString(r.cpuSection())
	b.WriteString(r.sweepSection(chart))
	b.WriteString(r.clusterSection())
	b.WriteString(r.httpSection())
	b.WriteString(r.drainSection())

	b.WriteString("\n## How it was measured\n\n")
	b.WriteString("- **e2e**: each unique message is published to a fresh JetStream stream (`Nats-Msg-Id` = its ID; copies without it, so the consumer meets them); the real `./worker` binary consumes, charges through stripe-go and mails through sendgrid-go against the simulators, and records in a fresh Postgres database. A message is done when its `processed_messages` row exists and, when paid, its receipt reached a final state. Latency runs from the publish to the `now()` of the transaction that recorded the last effect, on the harness's clock.\n")
	b.WriteString("- **counts**: each counted phase lies between two readings, taken once the dev server's `action` counter (`--metrics-port`, namespace `default`, by `action_type`) has stopped changing and " +
		fmt.Sprintf("%s have passed. ", c.Settle) +
		"Postgres transactions are counted as they end by a proxy in the harness that the workers and the reference points connect through (every ReadyForQuery with status idle ends one: a commit, or a rollback after an error or a ROLLBACK), which is what `pg_stat_database.xact_commit` counts; xact_commit itself cannot be read per phase here, because Postgres 15 publishes an idle backend's counts only at its next transaction. The harness's own queries go through a second proxy and are not counted with them; the cross-check above compares the totals with xact_commit. History events are the mean `HistoryLength` of up to " +
		fmt.Sprintf("%d", c.HistorySample) + " workflows of the phase (`DescribeWorkflowExecution`).\n")
	b.WriteString("- **Temporal floor**: a bench-only workflow with two no-op local activities, started with `EnableEagerStart` from the client its worker uses, in the harness process; measured before, between and after the e2e runs, and each e2e run's ratio divides by the mean of the two floors beside it. **naive layout**: two regular activities doing the same charge, mail and record, started from a second client. **plain consumer**: one transaction per message (`INSERT … ON CONFLICT DO NOTHING` of the processed row, and the order's upsert for a new one), no broker, no Temporal.\n")
	b.WriteString("- **duplicate burst**: copies of recorded messages published back to back; its rate is the copies the inbox counted over the time from the first publish. **scale-out**: the same e2e path with more worker processes (same binary, task queue and durable consumer) against the one dev server; each added worker's pool is " +
		fmt.Sprintf("%d", extraWorkerConns) + " connections (`DATABASE_MAX_CONNS`; the first keeps the default), as Postgres here allows 100 connections in all.\n")
	b.WriteString("- **CPU**: user+system seconds from `/proc/<pid>/stat` of the worker processes, the dev server, the harness, every `postgres` and `nats-server` process, sampled at each phase's start and end; `other` is the rest of the machine's busy time (`/proc/stat`). Peak RSS is the largest worker `VmHWM`. Instructions, where the machine counts them, are `perf stat -p` over the same interval of the e2e and floor runs.\n")

	b.WriteString("\n## Notes\n\n")
	for _, n := range r.notes() {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// costSection renders the counts per message: actions by type, history
// events and Postgres commits.
func (r Report) costSection() string {
	var b strings.Builder
	b.WriteString("\n## Temporal actions, history events and Postgres commits per message\n\n")
	b.WriteString("These do not depend on how loaded the machine was. Actions are what Temporal Cloud bills; the dev server counts them by type (`grpc_` and `command_` prefixes dropped here).\n\n")
	b.WriteString("| phase | per | units | actions | actions by type | history events | Postgres commits | rollbacks |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.costRows() {
		rollbacks := "-"
		if c.costs.CommitsMeasured() {
			rollbacks = fmt.Sprintf("%.0f", c.costs.Rollbacks)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | **%s** | %s | %s | **%s** | %s |\n", c.name, c.costs.Unit, c.costs.Units,
			fmtPer(c.costs.ActionsPer(), c.costs.ActionsMeasured()), c.costs.ActionsByType(), fmtEvents(c.costs),
			fmtPer(c.costs.CommitsPer(), c.costs.CommitsMeasured()), rollbacks)
	}
	b.WriteString("\nThe commits by what their statements change (verbs and tables, `+` joining those of one statement, a CTE; `tx(…)` is an explicit transaction; `SELECT t` a read; `prepare` a statement's preparation on a connection; `connect` a session's start), per unit:\n\n")
	for _, c := range r.costRows() {
		if c.costs.CommitsMeasured() && c.costs.Unit != "message sent" {
			fmt.Fprintf(&b, "- %s, per %s: %s\n", c.name, c.costs.Unit, c.costs.CommitsByShapeText())
		}
	}
	b.WriteString("\nWhat each unit asked of the dev server: its mean history size (`HistorySizeBytes`, the same sample as the events), and its frontend requests (`service_requests`, long polls included, so an idle interval adds polls) and persistence requests (`persistence_requests`, every service: reads and writes of its SQLite) per unit, those under 0.05 left out:\n\n")
	for _, c := range r.costRows() {
		if c.costs != nil && c.costs.ServerRequests != nil {
			fmt.Fprintf(&b, "- %s, per %s: history %s bytes; %s\n", c.name, c.costs.Unit, fmtBytes(c.costs), c.costs.ServerRequestsText())
		}
	}
	b.WriteString("\nProvider requests per unit (the simulators' counters; a paid message creates and confirms its PaymentIntent, then sends one receipt):\n\n")
	for _, c := range r.costRows() {
		if c.costs != nil && len(c.costs.ProviderRequests) > 0 {
			fmt.Fprintf(&b, "- %s, per %s: %s\n", c.name, c.costs.Unit, c.costs.ProviderRequestsText())
		}
	}
	if bg, ok := r.backgroundCommits(); ok {
		fmt.Fprintf(&b, "\nWith no message flowing the worker commits %.1f transactions/s (its pollers; measured over the floor runs, which touch no table of its): %.2f of the e2e run's commits per unique message are that background, over its %s between readings.\n",
			bg, bg*r.E2E.Costs.Interval.Seconds()/math.Max(1, float64(r.E2E.Costs.Units)), r.E2E.Costs.Interval.Round(time.Millisecond))
	}
	if cc := r.CommitCheck; cc != nil && cc.XactCommit > 0 {
		fmt.Fprintf(&b, "\nCross-check over the whole run, read once every connection had closed: `pg_stat_database.xact_commit` of the run's database grew by %.0f; the workers' proxy counted %.0f and the harness's own %.0f: %.2f%% apart. Transactions no proxy saw are in xact_commit alone: Postgres's own work on the database (it made %.0f autovacuum and autoanalyze runs there, each one transaction or more) and anything this run did not identify. The per-phase figures are the proxy's; `TestPGProxyCountsWhatPostgresCounts` checks the proxy against xact_commit transaction by transaction.\n",
			cc.XactCommit, cc.Proxy, cc.Harness, cc.Difference()*100, cc.AutoMaintenance)
	}
	return b.String()
}

// serverProfileSection is the dev server's profile split by part of its
// work; "" when none was taken.
func (r Report) serverProfileSection() string {
	p := r.ServerProfile
	if p == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Where the dev server's CPU went\n\n")
	fmt.Fprintf(&b, "%s. The share of the dev server's samples under each function, children included, so a part and the parts it calls overlap; the floor's beside the e2e's shows what the e2e adds.\n\n", p.What)
	b.WriteString("| part of the work | function | e2e 1 | floor 2 |\n|---|---|---|---|\n")
	for _, c := range ServerComponents {
		fmt.Fprintf(&b, "| %s | `%s` | %.1f%% | %.1f%% |\n", c.Name, c.Symbol, p.E2E[c.Name], p.Floor[c.Name])
	}
	return b.String()
}

// backgroundCommits is the worker's commit rate with no message flowing:
// the floor phases touch no table, so their commits are the worker's
// pollers (and Postgres's own) over their interval.
func (r Report) backgroundCommits() (float64, bool) {
	var n, secs float64
	floors, _ := r.series()
	for _, f := range floors {
		if c := f.Costs; c.CommitsMeasured() && c.Interval > 0 {
			n += c.Commits
			secs += c.Interval.Seconds()
		}
	}
	if secs == 0 || !r.E2E.Costs.CommitsMeasured() {
		return 0, false
	}
	return n / secs, true
}

// sweepSection renders the throughput and latency of every run.
func (r Report) sweepSection(chart string) string {
	var b strings.Builder
	b.WriteString("\n## Throughput, latency, the sweep and the scale-out\n\n")
	b.WriteString("`per s` is unique messages (workflows) per second; for the plain consumer every message handled, for the burst copies recognised. Timings vary with the machine's load.\n\n")
	h := header.cells()
	b.WriteString("| " + strings.Join(h, " | ") + " |\n|" + strings.Repeat("---|", len(h)) + "\n")
	for _, x := range r.rows() {
		b.WriteString("| " + strings.Join(x.cells(), " | ") + " |\n")
	}
	if k := r.kneeText(); k != "" {
		fmt.Fprintf(&b, "\n%s\n", k)
	}
	if chart != "" {
		fmt.Fprintf(&b, "\n![throughput per approach and the sweep's latency](%s)\n", chart)
	}
	return b.String()
}

// kneeText says where the sweep's knee is, from each point's rate over the
// floors beside it; "" without such a sweep.
func (r Report) kneeText() string {
	if r.Knee == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.Sweep))
	for _, p := range r.Sweep {
		parts = append(parts, fmt.Sprintf("%d: %.2f×", p.InFlight, ratio(p.Throughput, p.FloorBeside)))
	}
	return fmt.Sprintf("the sweep over the %d-workflow floors beside each point (in-flight: rate over theirs): %s; its knee, the smallest in-flight within %.0f%% of the best, is **%d** (the run's in-flight %d)",
		max(50, r.Config.FloorWorkflows/4), strings.Join(parts, ", "), (1-kneeShare)*100, r.Knee, r.Config.InFlight)
}

// unsteadyFloors is how far apart the two floors of a round may be
// before the report says the machine's speed changed within it.
const unsteadyFloors = 1.3

// notes are the honest remarks that follow from the numbers.
func (r Report) notes() []string {
	var n []string
	if bg := r.Environment.BackgroundBusy; bg > 0.15 {
		n = append(n, fmt.Sprintf("**The machine was not idle**: %.0f%% of the CPUs were busy during the 2 s before the run (load average %s); the timings are lower than this machine gives when idle. The counts are not affected.", bg*100, r.Environment.LoadAverage))
	}
	for i, x := range r.Rounds {
		lo, hi := math.Min(x.FloorBefore, x.FloorAfter), math.Max(x.FloorBefore, x.FloorAfter)
		if lo > 0 && hi/lo > unsteadyFloors {
			n = append(n, fmt.Sprintf("Round %d's floors differ by %.1f× (%.1f and %.1f/s): the machine's speed changed within the round, so its rate ratio (%.2f×) says more about the load than about the code; its CPU per message (%.2f× the floors') less so.",
				i+1, hi/lo, x.FloorBefore, x.FloorAfter, x.Ratio, x.CPURatio))
		}
	}
	if r.E2E.Suppressed != r.E2E.Duplicates {
		n = append(n, fmt.Sprintf("The inbox counted %d copies where %d were published (a redelivery counts as one more copy; a shortfall means copies were still in flight when the wait ended).", r.E2E.Suppressed, r.E2E.Duplicates))
	}
	if b := r.Burst.Costs; b.ActionsMeasured() && b.ActionsTotal() > 0 {
		n = append(n, fmt.Sprintf("The duplicate burst cost %.0f Temporal actions (%s): a copy should cost none. (The worker's pruning schedule fires once an hour; a run firing inside the burst's interval of %s would show here too.)",
			b.ActionsTotal(), b.ActionsByType(), b.Interval.Round(time.Second)))
	}
	for _, w := range r.WorkerWarnings {
		n = append(n, fmt.Sprintf("The worker logged %d× at %s: %q (first: `%s`).", w.Count, w.Level, w.Msg, w.Example))
	}
	if len(r.WorkerWarnings) == 0 {
		n = append(n, "The workers logged no warning and no error during the run.")
	}
	return n
}

// cpuSection renders where the CPU went, per unique message, for the e2e
// path, the reference points and the scale-out, and the worker's profile.
func (r Report) cpuSection() string {
	var b strings.Builder
	b.WriteString("\n## Where the CPU goes\n\n")
	b.WriteString("CPU milliseconds per unique message (per workflow for the floor and the naive layout, per message sent for the plain consumer, per copy for the duplicate burst), by process, over each phase. Every process shares the same CPUs, so `CPUs × 1000 / total` bounds the rate when the run is CPU-bound. The floor's and the naive layout's workers run inside the harness.\n\n")
	b.WriteString("| run | dev server | worker(s) | harness | Postgres | NATS | other | total | bound | measured | machine busy |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	type named struct {
		name string
		r    Result
		n    int
	}
	var runs []named
	floors, e2es := r.series()
	for i, f := range floors {
		runs = append(runs, named{fmt.Sprintf("Temporal floor %d", i+1), f, f.Unique})
		if i < len(e2es) {
			runs = append(runs, named{fmt.Sprintf("e2e %d", i+1), e2es[i], e2es[i].Unique})
		}
	}
	runs = append(runs, named{"naive layout", r.Naive, r.Naive.Unique}, named{"plain consumer", r.Plain, r.Plain.Messages},
		named{"duplicate burst (per copy)", Result{CPU: r.Burst.CPU, Throughput: r.Burst.Rate}, r.Burst.Suppressed})
	for _, s := range r.ScaleOut {
		runs = append(runs, named{fmt.Sprintf("scale-out, %d workers", s.Workers), s, s.Unique})
	}
	for _, x := range runs {
		if x.n == 0 {
			continue
		}
		c := x.r.CPU
		total := c.total()
		bound := "-"
		if total > 0 {
			bound = fmt.Sprintf("%.0f/s", float64(x.n)/total*float64(max(1, r.Environment.CPUs)))
		}
		// Sub-millisecond costs (a copy, a plain consumer's message) keep
		// three decimals.
		format := "%.1f"
		if perUnit(total, x.n) < 1 {
			format = "%.3f"
		}
		per := func(v float64) string { return fmt.Sprintf(format, perUnit(v, x.n)) }
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | **%s** | %s | %s/s | %.0f%% |\n", x.name,
			per(c.Server), per(c.Worker), per(c.Harness), per(c.Postgres), per(c.NATS), per(c.Other), per(total), bound, fmtRate(x.r.Throughput), c.MachineBusy*100)
	}
	if s := r.scaleOutFinding(); s != "" {
		b.WriteString("\n" + s + "\n")
	}
	if r.WorkerProfileTop != "" {
		fmt.Fprintf(&b, "\n%s, taken during the e2e run (`go tool pprof -top`; the profile is `%s` beside this report):\n\n```\n%s\n```\n",
			r.WorkerProfileWhat, r.WorkerProfileFile, strings.TrimSpace(r.WorkerProfileTop))
	}
	return b.String()
}

// scaleOutFinding says, from the scale-out's measurements, what bounded
// the throughput as workers were added: which of the run's own processes
// used the most CPU (the rest of the machine's busy time is named apart).
func (r Report) scaleOutFinding() string {
	if len(r.ScaleOut) < 2 {
		return ""
	}
	first, last := r.ScaleOut[0], r.ScaleOut[len(r.ScaleOut)-1]
	c := last.CPU
	own := c.total() - c.Other
	if own <= 0 || first.Throughput <= 0 {
		return ""
	}
	parts := []struct {
		name string
		v    float64
	}{{"the dev server", c.Server}, {"the workers", c.Worker}, {"Postgres", c.Postgres}, {"NATS", c.NATS}, {"the harness", c.Harness}}
	top := parts[0]
	for _, p := range parts[1:] {
		if p.v > top.v {
			top = p
		}
	}
	gain := last.Throughput / first.Throughput
	s := fmt.Sprintf("Scale-out: %d → %d worker processes moved throughput %.1f → %.1f msg/s (%.2f×) with the machine %.0f%% busy. At %d workers %s used the most CPU of the run's own processes: %.0f%% of theirs (%.1f ms per message; the workers together %.1f ms); other work on the machine took %.1f ms per message more.",
		first.Workers, last.Workers, first.Throughput, last.Throughput, gain, c.MachineBusy*100, last.Workers, top.name, top.v/own*100, perUnit(top.v, last.Unique), perUnit(c.Worker, last.Unique), perUnit(c.Other, last.Unique))
	if gain < 1.15 && c.MachineBusy >= 0.85 {
		s += fmt.Sprintf(" More workers did not add throughput because the CPUs were already full, and %s is the largest share of the run's own CPU: it is the bound here.", top.name)
	}
	return s
}

func (c CPU) total() float64 { return c.own() + c.Other }

// own is the CPU of the run's own processes: the machine's other work
// (Other) left out, so that other tenants' load does not enter it.
func (c CPU) own() float64 { return c.Server + c.Worker + c.Harness + c.Postgres + c.NATS }

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
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=15", path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof failed: %v\n%s", err, out)
	}
	return string(out)
}
