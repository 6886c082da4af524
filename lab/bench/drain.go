package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/effectively/effectively/lab/soak"
)

// The long drain runs at Stripe's own limits: the simulator answers 429
// past 25/s per endpoint and 100/s globally (live mode), SendGrid past 25/s
// per key, and the workers are configured at 80% of them (20/s and 80/s), as
// docs/operations.md advises.
const (
	drainSimEndpoint    = 25
	drainWorkerEndpoint = 20
)

// drainBurst is the fairness phase's orders at once: 10× its 100 refund
// probes (issue 24's "a 10× backlog"), fewer in a short run.
const drainBurst = 1000

// DrainPhase is the long backlog drain (issue 24): its configuration and
// what lab/soak's RunDrain measured.
type DrainPhase struct {
	Backlog     int               `json:"backlog"`
	SimEndpoint float64           `json:"sim_endpoint_limit"`
	Endpoint    float64           `json:"worker_endpoint_limit"`
	Report      *soak.DrainReport `json:"report"`
}

// runDrain runs TestBacklogDrain of lab/soak with a backlog of n at
// Stripe's limits, in its own stack (a dev server, the rate-limited
// simulators, two worker processes), and reads its report.
func runDrain(ctx context.Context, cfg Config, n int) (*DrainPhase, error) {
	dir, err := os.MkdirTemp("", "bench-drain-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "drain.json")
	// A drain at 20 msg/s takes n/20 s; the test's own timeout bounds it.
	timeout := time.Duration(n/drainWorkerEndpoint)*time.Second*3 + 10*time.Minute
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", timeout.String(), "-run", "^TestBacklogDrain$", "./soak/", "-args", //nolint:gosec // fixed arguments
		"-drain-backlog", strconv.Itoa(n), "-drain-burst", strconv.Itoa(min(drainBurst, n)),
		"-drain-sim-endpoint", strconv.Itoa(drainSimEndpoint), "-drain-endpoint", strconv.Itoa(drainWorkerEndpoint),
		"-drain-json", out)
	cmd.Dir = filepath.Join(cfg.RepoRoot, "lab")
	cmd.Env = os.Environ()
	if cli, err := temporalCLI(cfg); err == nil {
		cmd.Env = append(cmd.Env, "TEMPORAL_CLI="+cli)
	}
	b, err := cmd.CombinedOutput()
	phase := &DrainPhase{Backlog: n, SimEndpoint: drainSimEndpoint, Endpoint: drainWorkerEndpoint}
	if raw, rerr := os.ReadFile(out); rerr == nil {
		var rep soak.DrainReport
		if jerr := json.Unmarshal(raw, &rep); jerr == nil {
			phase.Report = &rep
		}
	}
	if phase.Report == nil {
		return nil, fmt.Errorf("drain test: %w:\n%s", err, tailLines(string(b), 40))
	}
	if err != nil { // a target missed: the report says which
		phase.Report.Violations = append(phase.Report.Violations, "TestBacklogDrain: "+tailLines(string(b), 10))
	}
	return phase, nil
}

// targets are the drain's rows of the targets table (issue 24), all at
// Stripe's limits: the 429s' share; the fairness figure, a quiet route's
// p99 beside a 10× backlog of another against its idle p99; and the same
// route's p99 behind the backlog after the outage; and the route's
// longest wait behind the backlog against soak.WaitBound. None when the
// phase did not run.
func (d *DrainPhase) targets() []Target {
	if d == nil || d.Report == nil {
		return nil
	}
	r := d.Report
	out := []Target{{What: "429s during the drain (Stripe's limits)", Want: "< 1%", Value: 100 * r.TooManyShare,
		Met:      r.Requests > 0 && r.TooManyShare < 0.01,
		Measured: fmt.Sprintf("%.2f%% (%d of %d requests; %d drained at %.0f%% of the limit)", 100*r.TooManyShare, r.TooMany, r.Requests, r.Backlog, 100*r.Rate/max(r.Limit, 1))}}
	if r.Burst > 0 {
		out = append(out, Target{What: fmt.Sprintf("refunds' p99 beside %d orders at once / idle (fairness, Stripe's limits)", r.Burst), Want: "≤ 2×",
			Value: r.BurstRatio(), Met: r.IdleP99 > 0 && r.BurstRatio() <= 2 && r.BurstCounts(),
			Measured: fmt.Sprintf("%.2f× (%s against %s idle, %d probes; median %s)", r.BurstRatio(), r.BurstP99.Round(time.Millisecond),
				r.IdleP99.Round(time.Millisecond), r.BurstProbes, r.BurstP50.Round(time.Millisecond))})
	}
	longest := max(r.BusyMax, r.BusyFirst, r.BurstMax)
	out = append(out, Target{What: "refunds' longest wait behind another route's backlog", Want: fmt.Sprintf("≤ %s", soak.WaitBound),
		Value: longest.Seconds(), Met: len(r.Waits()) == 0,
		Measured: fmt.Sprintf("%s (the backlog after the outage drained in %s, the burst in %s)",
			longest.Round(time.Millisecond), r.Drained.Round(time.Second), r.BurstDrained.Round(time.Second))})
	return append(out, Target{What: fmt.Sprintf("refunds' p99 behind the %d after the outage / idle", r.Backlog), Want: "≤ 2×",
		Value: r.Ratio(), Met: r.DrainBaseline() > 0 && r.Ratio() <= 2 && r.DrainCounts(),
		Measured: fmt.Sprintf("%.2f× (%s against %s idle, %d probes over the drain and as many idle; median %s; longest %s, sent %s after the workers' readiness; the first %s; the %d sent %s or more after it: p99 %s)", r.Ratio(), r.BusyP99.Round(time.Millisecond),
			r.DrainBaseline().Round(time.Millisecond), r.BusyProbes, r.BusyP50.Round(time.Millisecond), r.BusyMax.Round(time.Millisecond), r.BusyMaxAt.Round(time.Millisecond), r.BusyFirst.Round(time.Millisecond),
			r.BusySettledProbes, soak.RestartSettle, r.BusySettledP99.Round(time.Millisecond))})
}

func tailLines(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// drainSection is the drain's part of the Markdown report.
func (r Report) drainSection() string {
	d := r.Drain
	if d == nil || d.Report == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Backlog drain at Stripe's limits\n\n%d order messages piled up in JetStream while both workers were stopped, then drained by two worker processes "+
		"against simulators answering 429 past %.0f requests/s per Stripe endpoint (%.0f/s globally) and per SendGrid key; the workers were configured at %.0f/s per endpoint (%.0f/s globally). "+
		"Meanwhile refunds (another route) were timed against their idle latency; before the outage, with the workers warm, %d orders came at once beside the same refunds (the fairness phase). `TestBacklogDrain` of lab/soak, `-drain-backlog %d`.\n\n```\n%s```\n",
		d.Backlog, d.SimEndpoint, 4*d.SimEndpoint, d.Endpoint, 4*d.Endpoint, d.Report.Burst, d.Backlog, d.Report)
	for _, v := range d.Report.Violations {
		fmt.Fprintf(&b, "- **violation**: %s\n", v)
	}
	return b.String()
}
