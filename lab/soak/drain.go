package soak

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/workerproc"
)

// DrainConfig sizes a backlog drain (RunDrain). Zero fields take the
// defaults noted.
type DrainConfig struct {
	// Backlog is how many order.placed messages pile up while the workers
	// are stopped. Default 5000.
	Backlog int
	// Workers is how many worker processes drain it. Default 2.
	Workers int
	// Probes is how many refunds of the other route are timed idle and
	// beside the burst. Default 100: the p99 of fewer is their slowest.
	Probes int
	// BusyProbes is how many are timed during the drain after the outage,
	// BusyEvery apart, and as many idle, as far apart, for its baseline.
	// Default: spread over 90% of the drain's expected time (Backlog /
	// Limit), one a second at 20/s (a twentieth of the limit, so that their
	// receipts take little of SendGrid's share from the backlog's) and
	// never closer than ProbeEvery; at least Probes.
	// Spread, their p99 is the whole drain's, not its first seconds' (at
	// ProbeEvery, 100 probes covered 25 s of a drain of 100-500 s).
	BusyProbes int
	BusyEvery  time.Duration
	// ProbeEvery spaces the probes. Default 250ms, fitted to the burst:
	// less when it drains faster than Probes of them (Burst / Limit), so
	// that they all run beside it, and more when the limit is under 20/s,
	// so that the probes stay within a fifth of it.
	ProbeEvery time.Duration
	// Burst is how many order.placed messages come at once while the
	// workers run (warm), before the outage: the fairness phase, in which
	// the refund route's probes run beside the orders route's backlog of
	// Burst. Default 10× Probes (issue 24's "a 10× backlog"); negative
	// skips the phase.
	Burst int
	// BurstRate, when above 0, publishes the burst's orders at that many
	// per second beside the probes rather than at once: the arrival a
	// source admitting a route at its start rate would let through.
	BurstRate float64
	// ProbeAfter is how long after the workers come back the busy probes
	// start. Default 0: at once, while the backlog's workflows start.
	ProbeAfter time.Duration
	// Limit is the configured messages per second the providers' limits
	// allow (the lowest of the endpoint and SendGrid limits), for the
	// report. Required.
	Limit float64
	// Timeout bounds the whole run. Default 20m and the idle probes at the
	// drain's spacing (BusyProbes × BusyEvery).
	Timeout time.Duration
	// Seed makes the IDs unique per run. Default: the time.
	Seed uint64
	// Logf receives progress lines. Default: none.
	Logf func(format string, args ...any)
}

// DrainStack is what RunDrain runs on: the soak's Stack (Send publishes an
// order.placed message) and the refund route's publisher.
type DrainStack struct {
	Stack
	// watch, set by RunDrain, times the probes to their commits.
	watch *commitWatch
	// SendRefund publishes an order.refund_requested message.
	SendRefund func(ctx context.Context, raw []byte) error
	// ServerMetrics is the URL of the Temporal server's own metrics
	// (Prometheus text); "" reads none (the report then shows the CPU only).
	ServerMetrics string
	// SimStats reads the simulators' counts when they run apart (Stripe
	// and SendGrid in Stack are then nil); nil reads Stack's.
	SimStats func(context.Context) (stripesim.Stats, sendgridsim.Stats, error)
	// RefundCall, when set, says when the Stripe simulator first received
	// the refund of a message and when it answered it (StripeCalls): the
	// probes' refund step is then split at Stripe. nil splits nothing.
	RefundCall func(messageID string) (received, answered time.Time, ok bool)
}

// StripeCalls serves Next (the Stripe simulator) and notes, for the
// refund of each message, when its first POST /v1/refunds arrived and
// when it was answered (the message ID is what follows "refund:" in its
// Idempotency-Key).
type StripeCalls struct {
	Next http.Handler
	mu   sync.Mutex
	seen map[string][2]time.Time
}

func (c *StripeCalls) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	i := strings.LastIndex(key, "refund:")
	if r.Method != http.MethodPost || r.URL.Path != "/v1/refunds" || i < 0 {
		c.Next.ServeHTTP(w, r)
		return
	}
	got := time.Now()
	c.Next.ServeHTTP(w, r)
	answered := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string][2]time.Time{}
	}
	if id := key[i+len("refund:"):]; c.seen[id][0].IsZero() {
		c.seen[id] = [2]time.Time{got, answered}
	}
}

// Refund is when the refund of messageID first reached Stripe and was
// answered; ok is false when it never did, or c is nil.
func (c *StripeCalls) Refund(messageID string) (received, answered time.Time, ok bool) {
	if c == nil {
		return time.Time{}, time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seen[messageID]
	return t[0], t[1], ok
}

// simStats reads the simulators' counts.
func (st DrainStack) simStats(ctx context.Context) (stripesim.Stats, sendgridsim.Stats, error) {
	if st.SimStats != nil {
		return st.SimStats(ctx)
	}
	return st.Stripe.Stats(), st.SendGrid.Stats(), nil
}

// DrainReport is what a drain measured.
type DrainReport struct {
	Backlog int `json:"backlog"`
	// Probes is how many refunds each phase timed.
	Probes int `json:"probes"`
	// Drained is how long, after the workers came back, the last message
	// of the backlog took to be processed; Rate is Backlog / Drained.
	Drained time.Duration `json:"drained"`
	// Ready is how long the workers took from their start to answering
	// /readyz; the busy probes begin then (after ProbeAfter).
	Ready time.Duration `json:"ready"`
	Rate  float64       `json:"rate"`
	Limit float64       `json:"limit"`
	// Requests and TooMany are the providers' requests and 429s during the
	// drain (both simulators); TooManyShare is their ratio.
	Requests     int     `json:"requests"`
	TooMany      int     `json:"too_many"`
	TooManyShare float64 `json:"too_many_share"`
	// OldestMessage is the longest a backlog message waited from its
	// publication to its record; OldestKey the longest a payment key
	// lived from its first claim to its record (Stripe keeps keys 24 h).
	OldestMessage time.Duration `json:"oldest_message"`
	OldestKey     time.Duration `json:"oldest_key"`
	// AttemptsPerCharge is the mean of the regular charge activity's
	// attempts per backlog message, over a sample (0 for a charge that
	// its local attempt made): each attempt past the first is a request
	// the shared limit sent back (or a failure), a round trip through
	// Temporal that costs its server and the workers.
	AttemptsPerCharge float64 `json:"attempts_per_charge"`
	// IdleP99 and BusyP99 are the other route's (refunds') p99 latency,
	// publication to done (the commit of the refund's record and of its
	// receipt's, commitWatch), without and with the backlog; BusyMax its
	// longest wait behind the backlog.
	IdleP99 time.Duration `json:"idle_p99"`
	BusyP99 time.Duration `json:"busy_p99"`
	// IdleToRefundP99, IdleDrainToRefundP99, BurstToRefundP99 and
	// BusyToRefundP99 are the same probes' p99 to their refund's committed
	// record alone, without the receipt that the p99s above wait for too.
	IdleToRefundP99      time.Duration `json:"idle_to_refund_p99,omitempty"`
	IdleDrainToRefundP99 time.Duration `json:"idle_drain_to_refund_p99,omitempty"`
	BurstToRefundP99     time.Duration `json:"burst_to_refund_p99,omitempty"`
	BusyToRefundP99      time.Duration `json:"busy_to_refund_p99,omitempty"`
	BusyMax              time.Duration `json:"busy_max"`
	// BusyMaxAt is when the longest busy probe was sent, from the first.
	BusyMaxAt time.Duration `json:"busy_max_at"`
	// Burst, BurstP99, BurstP50 and BurstMax are the fairness phase's:
	// the orders that came at once with the workers warm, and the refund
	// probes' latencies beside them (against IdleP99); BurstDrained is how
	// long the burst took to be processed, BurstServer what the server
	// and the machine did meanwhile.
	Burst     int     `json:"burst"`
	BurstRate float64 `json:"burst_rate,omitempty"` // 0: at once
	// BurstProbes is how many of the probes were sent before the burst's
	// last order was processed: BurstP99, BurstP50 and BurstMax are theirs
	// alone; the split below (and BurstSlowest) covers every probe.
	BurstProbes  int           `json:"burst_probes"`
	BurstP99     time.Duration `json:"burst_p99"`
	BurstP50     time.Duration `json:"burst_p50"`
	BurstMax     time.Duration `json:"burst_max"`
	BurstDrained time.Duration `json:"burst_drained"`
	BurstServer  ServerWindow  `json:"burst_server"`
	// BurstStartP99, BurstRefundP99 and BurstReceiptP99 split the burst's
	// probes as the busy ones are split: inbox row to the refund's claim,
	// the refund, and its record to the receipt's.
	BurstStartP99   time.Duration `json:"burst_start_p99"`
	BurstRefundP99  time.Duration `json:"burst_refund_p99"`
	BurstReceiptP99 time.Duration `json:"burst_receipt_p99"`
	// BurstTaskP99, BurstScheduledP99 and BurstDispatchP99 split the start
	// as BusyTaskP99, BusyScheduledP99 and BusyDispatchP99 do.
	BurstTaskP99      time.Duration `json:"burst_task_p99"`
	BurstScheduledP99 time.Duration `json:"burst_scheduled_p99"`
	BurstDispatchP99  time.Duration `json:"burst_dispatch_p99"`
	// BurstRegular and BusyRegular count the probes whose refund ran as a
	// regular activity (its local attempt failed); the scheduled and
	// dispatch figures are theirs alone.
	BurstRegular int `json:"burst_regular"`
	BusyRegular  int `json:"busy_regular"`
	// BurstSlowest and BusySlowest are the slowest probe's timeline in each
	// phase: its history's events and its rows, from its publication.
	BurstSlowest string `json:"burst_slowest"`
	BusySlowest  string `json:"busy_slowest"`
	// BurstFive and BusyFive are each phase's five slowest probes, their
	// latency and when they were sent: whether a p99 is one moment's or
	// spread over the phase.
	BurstFive string `json:"burst_five"`
	BusyFive  string `json:"busy_five"`
	// IdleFive and IdleDrainFive are the same of the idle probes, at the
	// burst's spacing and the drain's (IdleDrainP99's): where an idle
	// route's own tail comes from.
	IdleFive      string `json:"idle_five"`
	IdleDrainFive string `json:"idle_drain_five"`
	// BusyProbes is how many probes were sent, BusyEvery apart, before the
	// backlog's last message was processed: the busy figures are theirs
	// alone. BusyFirst is the first probe's latency, sent as the workers
	// answered /readyz (their start, which a restart without a backlog
	// also shows).
	BusyProbes int           `json:"busy_probes"`
	BusyEvery  time.Duration `json:"busy_every"`
	BusyFirst  time.Duration `json:"busy_first"`
	// BusySettledProbes and BusySettledP99 are the busy probes sent
	// RestartSettle or more after /readyz, and their p99: the drain
	// without the workers' restart, to tell the two apart. The target is
	// BusyP99's, restart included.
	BusySettledProbes int           `json:"busy_settled_probes"`
	BusySettledP99    time.Duration `json:"busy_settled_p99"`
	// IdleP50 and BusyP50 are the medians of the same latencies.
	IdleP50 time.Duration `json:"idle_p50"`
	BusyP50 time.Duration `json:"busy_p50"`
	// IdleDrainP99 and IdleDrainP50 are the idle latencies again, of as
	// many probes as BusyProbes sent BusyEvery apart: Ratio's baseline.
	// IdleP99 (Probes, ProbeEvery apart) is not: a p99 of n probes is their
	// ceil(0.99n)-th, near the k/(n+1) quantile (98.0% of 100 probes, 98.9%
	// of 450), and idle probes 1 s apart had about twice the p99 of probes
	// 250 ms apart (docs/operations.md). 0 in reports from before.
	IdleDrainP99 time.Duration `json:"idle_drain_p99"`
	IdleDrainP50 time.Duration `json:"idle_drain_p50"`
	// BusyIntakeP99 is the part of the busy latency before the inbox row
	// (the broker delivering in stream order), BusyWorkP99 the part after
	// it (Temporal, the shared limits).
	BusyIntakeP99 time.Duration `json:"busy_intake_p99"`
	BusyWorkP99   time.Duration `json:"busy_work_p99"`
	// The busy work's parts: inbox row to the refund's claim (the start,
	// Temporal's task queue), the refund's claim to its record (Stripe's
	// limits, the call), and its record to the receipt's (SendGrid's).
	BusyStartP99 time.Duration `json:"busy_start_p99"`
	// BusyCreatedP99 is the start's first part: inbox row to the
	// workflow's creation at the Temporal server.
	BusyCreatedP99 time.Duration `json:"busy_created_p99"`
	// BusyTaskP99 is inbox row to the workflow's first task started at a
	// worker.
	BusyTaskP99 time.Duration `json:"busy_task_p99"`
	// BusyScheduledP99 is inbox row to the refund activity's schedule,
	// BusyDispatchP99 its schedule to its start at a worker (the task
	// queue and the worker's slots).
	BusyScheduledP99 time.Duration `json:"busy_scheduled_p99"`
	BusyDispatchP99  time.Duration `json:"busy_dispatch_p99"`
	BusyRefundP99    time.Duration `json:"busy_refund_p99"`
	BusyReceiptP99   time.Duration `json:"busy_receipt_p99"`
	// IdleServer and BusyServer are what the Temporal server and the
	// machine did while the idle and the busy probes ran.
	IdleServer ServerWindow `json:"idle_server"`
	BusyServer ServerWindow `json:"busy_server"`
	// IdleCommits, BurstCommits and BusyCommits are the commit probe's
	// figures (CommitEvery) while the idle, the burst's and the busy probes
	// ran.
	IdleCommits  CommitStats `json:"idle_commits"`
	BurstCommits CommitStats `json:"burst_commits"`
	BusyCommits  CommitStats `json:"busy_commits"`
	// BusySlow counts the busy probes slower than twice DrainBaseline;
	// BusySlowStalled how many of them overlapped a synchronous commit of
	// CommitStall or more.
	BusySlow        int `json:"busy_slow"`
	BusySlowStalled int `json:"busy_slow_stalled"`
	// Charges and DoubleCharges count the backlog's charges at Stripe.
	Charges       int      `json:"charges"`
	DoubleCharges int      `json:"double_charges"`
	Violations    []string `json:"violations"`
}

// String renders the report as the soak and the bench print it.
func (r DrainReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backlog %d drained in %s: %.1f msg/s against a configured limit of %.0f msg/s (%.0f%%)\n",
		r.Backlog, r.Drained.Round(time.Second), r.Rate, r.Limit, 100*r.Rate/math.Max(r.Limit, 1))
	fmt.Fprintf(&b, "workers ready %s after their start; the busy probes from then on\n", r.Ready.Round(time.Millisecond))
	fmt.Fprintf(&b, "provider requests %d, 429s %d (%.2f%%, target < 1%%)\n", r.Requests, r.TooMany, 100*r.TooManyShare)
	fmt.Fprintf(&b, "oldest message waited %s; oldest payment key used %s after its first claim (Stripe keeps keys 24 h)\n",
		r.OldestMessage.Round(time.Second), r.OldestKey.Round(time.Millisecond))
	fmt.Fprintf(&b, "regular charge attempts per backlog message %.1f (a sample; each past the first sent back by the limit or failed)\n", r.AttemptsPerCharge)
	if r.Burst > 0 {
		arrival := "at once"
		if r.BurstRate > 0 {
			arrival = fmt.Sprintf("at %.0f/s", r.BurstRate)
		}
		fmt.Fprintf(&b, "fairness, workers warm: %d orders %s (drained in %s); the %d refunds sent meanwhile p99 %s against %s idle (%.1f×, target ≤ 2×), median %s, longest %s\n",
			r.Burst, arrival, r.BurstDrained.Round(time.Millisecond), r.BurstProbes, r.BurstP99.Round(time.Millisecond), r.IdleP99.Round(time.Millisecond), r.BurstRatio(),
			r.BurstP50.Round(time.Millisecond), r.BurstMax.Round(time.Millisecond))
		fmt.Fprintf(&b, "  the longest wait %s against the bound of %s\n", r.BurstMax.Round(time.Millisecond), WaitBound)
		if r.BurstToRefundP99 > 0 {
			fmt.Fprintf(&b, "  to the refund's committed record alone (without the receipt): p99 %s against %s idle (%.1f×)\n",
				r.BurstToRefundP99.Round(time.Millisecond), r.IdleToRefundP99.Round(time.Millisecond), ratio(r.BurstToRefundP99, r.IdleToRefundP99))
		}
		fmt.Fprintf(&b, "  to the refund's claim p99 %s, the refund p99 %s, to the receipt's record p99 %s\n",
			r.BurstStartP99.Round(time.Millisecond), r.BurstRefundP99.Round(time.Millisecond), r.BurstReceiptP99.Round(time.Millisecond))
		fmt.Fprintf(&b, "  from the inbox row: the first task p99 %s; %s\n", r.BurstTaskP99.Round(time.Millisecond), regularLine(r.BurstRegular, r.Probes, r.BurstScheduledP99, r.BurstDispatchP99))
		if r.BurstSlowest != "" {
			fmt.Fprintf(&b, "  the slowest: %s\n", r.BurstSlowest)
			fmt.Fprintf(&b, "  the five slowest: %s\n", r.BurstFive)
		}
		fmt.Fprintf(&b, "  the server and the machine meanwhile: %s\n", r.BurstServer)
		fmt.Fprintf(&b, "  commits meanwhile (a probe's, one of each kind every %s): %s\n", CommitEvery, r.BurstCommits)
	}
	fmt.Fprintf(&b, "after the outage, other route (refunds), %d sent one every %s while the backlog lasted: p99 idle %s (as many, as far apart), during the drain %s (%.1f×, target ≤ 2×), longest %s (sent %s into the probes); the first, sent as the workers answered /readyz, %s\n",
		r.BusyProbes, r.BusyEvery.Round(time.Millisecond), r.DrainBaseline().Round(time.Millisecond), r.BusyP99.Round(time.Millisecond), r.Ratio(), r.BusyMax.Round(time.Millisecond), r.BusyMaxAt.Round(time.Millisecond), r.BusyFirst.Round(time.Millisecond))
	if r.BusyToRefundP99 > 0 {
		fmt.Fprintf(&b, "  to the refund's committed record alone (without the receipt): p99 idle %s, during the drain %s (%.1f×)\n",
			r.IdleDrainToRefundP99.Round(time.Millisecond), r.BusyToRefundP99.Round(time.Millisecond), ratio(r.BusyToRefundP99, r.IdleDrainToRefundP99))
	}
	fmt.Fprintf(&b, "  median idle %s, during the drain %s; against the %d idle probes of the burst's spacing (p99 %s) the ratio would be %.1f×\n",
		cmp.Or(r.IdleDrainP50, r.IdleP50).Round(time.Millisecond), r.BusyP50.Round(time.Millisecond), r.Probes, r.IdleP99.Round(time.Millisecond), ratio(r.BusyP99, r.IdleP99))
	if r.BusySettledProbes > 0 {
		fmt.Fprintf(&b, "  the %d sent %s or more after /readyz (the restart over): p99 %s (%.1f×; not the target's figure, which counts the restart)\n",
			r.BusySettledProbes, RestartSettle, r.BusySettledP99.Round(time.Millisecond), ratio(r.BusySettledP99, r.DrainBaseline()))
	}
	if r.IdleDrainFive != "" {
		fmt.Fprintf(&b, "  the five slowest idle probes at the drain's spacing: %s; at the burst's: %s\n", r.IdleDrainFive, r.IdleFive)
	}
	for _, c := range []struct {
		what   string
		counts bool
		base   time.Duration
	}{{"beside the burst", r.Burst <= 0 || r.BurstCounts(), r.IdleP99}, {"after the outage", r.DrainCounts(), r.DrainBaseline()}} {
		if !c.counts {
			fmt.Fprintf(&b, "  the idle p99 %s is more than 2× the other idle series': a ratio against it may flatter, and the figure %s does not count as met\n",
				c.base.Round(time.Millisecond), c.what)
		}
	}
	fmt.Fprintf(&b, "  the longest wait %s against the bound of %s\n", max(r.BusyMax, r.BusyFirst).Round(time.Millisecond), WaitBound)
	fmt.Fprintf(&b, "  of which before the inbox (the broker, in stream order) p99 %s, after it (Temporal, the limits) p99 %s\n",
		r.BusyIntakeP99.Round(time.Millisecond), r.BusyWorkP99.Round(time.Millisecond))
	fmt.Fprintf(&b, "  after it: to the refund's claim p99 %s (to the workflow's creation %s, to its first task %s), the refund p99 %s, to the receipt's record p99 %s\n",
		r.BusyStartP99.Round(time.Millisecond), r.BusyCreatedP99.Round(time.Millisecond), r.BusyTaskP99.Round(time.Millisecond), r.BusyRefundP99.Round(time.Millisecond), r.BusyReceiptP99.Round(time.Millisecond))
	fmt.Fprintf(&b, "  %s\n", regularLine(r.BusyRegular, max(r.BusyProbes, r.BusyRegular), r.BusyScheduledP99, r.BusyDispatchP99))
	if r.BusySlowest != "" {
		fmt.Fprintf(&b, "  the slowest: %s\n", r.BusySlowest)
		fmt.Fprintf(&b, "  the five slowest: %s\n", r.BusyFive)
	}
	if r.BusySlow > 0 {
		fmt.Fprintf(&b, "  of the %d slower than twice the idle p99, %d overlapped a synchronous commit of %s or more\n", r.BusySlow, r.BusySlowStalled, CommitStall)
	}
	fmt.Fprintf(&b, "commits (a probe's, one of each kind every %s) while the idle probes ran: %s\n  while the busy ones ran: %s\n", CommitEvery, r.IdleCommits, r.BusyCommits)
	fmt.Fprintf(&b, "the Temporal server's mean latencies (and the machine) while the probes ran:\n  idle:   %s\n  during: %s\n", r.IdleServer, r.BusyServer)
	fmt.Fprintf(&b, "charges %d, double charges %d (must be 0)\n", r.Charges, r.DoubleCharges)
	return b.String()
}

// regularLine says how many of n probes ran their refund as a regular
// activity, and when their activity was scheduled and started.
func regularLine(regular, n int, scheduled, dispatch time.Duration) string {
	if regular == 0 {
		return fmt.Sprintf("every refund of the %d ran inside its first workflow task (local attempt)", n)
	}
	return fmt.Sprintf("%d of the %d refunds ran as a regular activity: scheduled p99 %s after the inbox row, started p99 %s after its schedule",
		regular, n, scheduled.Round(time.Millisecond), dispatch.Round(time.Millisecond))
}

// BurstRatio is BurstP99 / IdleP99: the fairness figure with the workers
// warm (both of Probes probes, ProbeEvery apart).
func (r DrainReport) BurstRatio() float64 {
	return ratio(r.BurstP99, r.IdleP99)
}

// BurstCounts and DrainCounts report whether BurstRatio's and Ratio's
// baselines can be trusted. Both idle series time the same idle route; a
// baseline more than 2× the other's p99 was inflated (an idle phase that
// was not quiet, or its spacing alone), and a ratio against it may
// flatter, so it does not count. One run on the Temporal server on
// Postgres read 0.2× beside the burst against 269 ms, where the other
// series gave 42 ms. A baseline below the other flatters nothing.
func (r DrainReport) BurstCounts() bool { return !inflated(r.IdleP99, r.IdleDrainP99) }

// DrainCounts is BurstCounts for Ratio, the figure after the outage.
func (r DrainReport) DrainCounts() bool { return !inflated(r.DrainBaseline(), r.IdleP99) }

// inflated reports whether base is more than twice other (both known).
func inflated(base, other time.Duration) bool {
	return base > 0 && other > 0 && base > 2*other
}

// ratio is busy / idle, 0 without an idle figure.
func ratio(busy, idle time.Duration) float64 {
	if idle <= 0 {
		return 0
	}
	return float64(busy) / float64(idle)
}

// WaitBound is the longest a refund sent while the other route's backlog
// drains may take, whatever the backlog (issue 24: no route waits more
// than a bound behind another's backlog). The probes take tens of
// milliseconds, under a second on a saturated machine; a refund queued
// behind the backlog's intake took 5 s behind 5,000 (measured with the
// per-route consumers, the start pace and the hold turned off), and would
// take longer behind more.
const WaitBound = 3 * time.Second

// RestartSettle is how long after /readyz the workers' restart is taken to
// be over for BusySettledP99: the machine was saturated for 1–3 s after it
// in the 20th session's drains, and the probes sent then were the slowest.
const RestartSettle = 3 * time.Second

// Waits says which phase's longest refund (the busy phase's first probe
// included) took longer than WaitBound, one line each.
func (r DrainReport) Waits() []string {
	var out []string
	if longest := max(r.BusyMax, r.BusyFirst); longest > WaitBound {
		out = append(out, fmt.Sprintf("a refund took %s behind the %d after the outage (drained in %s): past the bound of %s",
			longest.Round(time.Millisecond), r.Backlog, r.Drained.Round(time.Second), WaitBound))
	}
	if r.Burst > 0 && r.BurstMax > WaitBound {
		out = append(out, fmt.Sprintf("a refund took %s beside the %d orders sent at once (drained in %s): past the bound of %s",
			r.BurstMax.Round(time.Millisecond), r.Burst, r.BurstDrained.Round(time.Second), WaitBound))
	}
	return out
}

// Ratio is BusyP99 / DrainBaseline: the fairness figure after the outage.
func (r DrainReport) Ratio() float64 {
	return ratio(r.BusyP99, r.DrainBaseline())
}

// DrainBaseline is Ratio's baseline: IdleDrainP99, or IdleP99 in a report
// without it.
func (r DrainReport) DrainBaseline() time.Duration {
	return cmp.Or(r.IdleDrainP99, r.IdleP99)
}

func (c *DrainConfig) setDefaults() {
	if c.Backlog == 0 {
		c.Backlog = 5000
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Probes == 0 {
		c.Probes = 100
	}
	if c.Burst == 0 {
		c.Burst = 10 * c.Probes
	}
	if c.ProbeEvery == 0 {
		c.ProbeEvery = 250 * time.Millisecond
		// The probes within 90% of the burst's drain (Burst / Limit), so
		// that their p99 is not their slowest: 150 ms at 60/s. Never more
		// than a fifth of the limit, so that the quiet route stays within
		// the limiter's express share (a quarter).
		if c.Burst > 0 && c.Limit > 0 {
			within := time.Duration(0.9 * float64(c.Burst) / c.Limit / float64(c.Probes) * float64(time.Second))
			c.ProbeEvery = max(min(c.ProbeEvery, within), time.Duration(5/c.Limit*float64(time.Second)))
		}
	}
	if c.BusyProbes == 0 || c.BusyEvery == 0 {
		c.BusyProbes, c.BusyEvery = busyProbes(c.Backlog, c.Limit, c.Probes, c.ProbeEvery, c.BusyProbes, c.BusyEvery)
	}
	if c.Timeout == 0 {
		// And the idle probes at the drain's spacing.
		c.Timeout = 20*time.Minute + time.Duration(c.BusyProbes)*c.BusyEvery
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// busyProbes spreads the busy probes over 90% of a drain of backlog at
// limit: every (a twentieth of the limit, at least probeEvery) apart, at
// least probes of them; a count or spacing given (n, every) is kept.
func busyProbes(backlog int, limit float64, probes int, probeEvery time.Duration, n int, every time.Duration) (int, time.Duration) {
	window := time.Duration(0)
	if limit > 0 {
		window = time.Duration(0.9 * float64(backlog) / limit * float64(time.Second))
	}
	switch {
	case n > 0:
		if every == 0 {
			every = max(probeEvery, window/time.Duration(n))
		}
	case every > 0:
		n = max(probes, int(window/every))
	default:
		every = probeEvery
		if limit > 0 {
			every = max(every, time.Duration(20/limit*float64(time.Second)))
		}
		if n = int(window / every); n < probes {
			n, every = probes, max(probeEvery, window/time.Duration(probes))
		}
	}
	return n, every
}

// RunDrain piles up a backlog of order.placed messages while the workers are
// stopped, brings them back, and measures the drain against the providers'
// rate limits (the simulators' limits should be on); meanwhile it times
// refunds, another route, against their idle latency.
func RunDrain(ctx context.Context, cfg DrainConfig, st DrainStack) (DrainReport, error) {
	cfg.setDefaults()
	rep := DrainReport{Backlog: cfg.Backlog, Limit: cfg.Limit, Burst: max(0, cfg.Burst), BurstRate: cfg.BurstRate, Probes: cfg.Probes}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	stem := fmt.Sprintf("drain_%d", cfg.Seed%1_000_000)
	orderBase := int64(5_000_000 + (cfg.Seed%1000)*100_000)

	var procs []*workerproc.Proc
	// start starts the workers and returns once each answers /readyz: a
	// message that comes while they are down waits for them whatever the
	// backlog, so the probes time the drain from then.
	start := func() error {
		var addrs []string
		for range cfg.Workers {
			addr, err := workerproc.HealthAddr()
			if err != nil {
				return err
			}
			p, err := workerproc.Start(st.WorkerBin, append(workerproc.Env(st.Worker), "EFFECTIVELY_HEALTH_ADDR="+addr))
			if err != nil {
				return err
			}
			procs, addrs = append(procs, p), append(addrs, addr)
		}
		for i, p := range procs {
			if err := workerproc.AwaitReady(ctx, p, addrs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	stop := func() {
		for _, p := range procs {
			p.Stop(20 * time.Second)
		}
		procs = nil
	}
	defer stop()
	if err := start(); err != nil {
		return rep, err
	}

	// Warm-up: orders the probes will refund, paid while idle.
	warm := make([]string, cfg.Probes)
	for i := range warm {
		warm[i] = fmt.Sprintf("%s_w%03d", stem, i)
		if err := st.Send(ctx, orderMsg(warm[i], orderBase+int64(i))); err != nil {
			return rep, err
		}
	}
	if err := awaitProcessed(ctx, st, "order-placed", warm); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	commits, stopCommits, err := startCommitProbe(ctx, st.Pool)
	if err != nil {
		return rep, err
	}
	watch, stopWatch, err := watchCommits(ctx, st.Pool)
	if err != nil {
		return rep, fmt.Errorf("drain: the probes' commit watch: %w", err)
	}
	defer stopWatch()
	st.watch = watch
	defer func() {
		if err := stopCommits(); err != nil {
			cfg.Logf("drain: %v", err)
		}
	}()
	before, err := readServer(ctx, st.ServerMetrics)
	if err != nil {
		return rep, err
	}
	idleFrom := time.Now()
	idle, err := probe(ctx, cfg, st, stem+"_ri", orderBase, cfg.Probes, cfg.ProbeEvery)
	if err != nil {
		return rep, fmt.Errorf("idle probes: %w", err)
	}
	after, err := readServer(ctx, st.ServerMetrics)
	if err != nil {
		return rep, err
	}
	rep.IdleServer = window(before, after)
	commits.markStalls(&idle)
	rep.IdleP99, rep.IdleFive = p99(idle.total), idle.five()
	rep.IdleToRefundP99 = p99(idle.toRefund)
	cfg.Logf("drain: idle refund p99 %s", rep.IdleP99)
	// The drain's baseline: as many probes as it sends, as far apart.
	idleDrain := idle
	if cfg.BusyProbes != cfg.Probes || cfg.BusyEvery != cfg.ProbeEvery {
		if idleDrain, err = probe(ctx, cfg, st, stem+"_rq", orderBase, cfg.BusyProbes, cfg.BusyEvery); err != nil {
			return rep, fmt.Errorf("idle probes at the drain's spacing: %w", err)
		}
		cfg.Logf("drain: idle refund p99 %s (%d probes %s apart; of their first %d, %s)", p99(idleDrain.total), cfg.BusyProbes, cfg.BusyEvery,
			cfg.Probes, p99(idleDrain.first(cfg.Probes)))
		commits.markStalls(&idleDrain)
	}
	rep.IdleCommits = commits.stats(idleFrom, time.Now())

	// Fairness with the workers warm: the orders route's backlog comes at
	// once (a producer's batch, a broker's reconnection), the refunds beside it.
	if cfg.Burst > 0 {
		if err := burst(ctx, cfg, st, stem, orderBase, commits, &rep); err != nil {
			return rep, fmt.Errorf("fairness burst: %w", err)
		}
		cfg.Logf("drain: a burst of %d orders: refund p99 %s (idle %s)", cfg.Burst, rep.BurstP99, rep.IdleP99)
	}

	// The outage: every worker stopped while the backlog piles up.
	stop()
	backlog := make([]string, cfg.Backlog)
	publishedAt := time.Now()
	if err := parallel(ctx, 16, len(backlog), func(i int) error {
		backlog[i] = fmt.Sprintf("%s_%05d", stem, i)
		return st.Send(ctx, orderMsg(backlog[i], orderBase+int64(cfg.Probes+i)))
	}); err != nil {
		return rep, fmt.Errorf("publish the backlog: %w", err)
	}
	cfg.Logf("drain: %d messages piled up in %s with the workers stopped", cfg.Backlog, time.Since(publishedAt).Round(time.Millisecond))
	s0, g0, err := st.simStats(ctx)
	if err != nil {
		return rep, fmt.Errorf("the simulators' counts before the drain: %w", err)
	}

	// Back: the drain, with the other route's probes meanwhile.
	back := time.Now()
	if err := start(); err != nil {
		return rep, err
	}
	rep.Ready = time.Since(back)
	cfg.Logf("drain: workers ready %s after their start", rep.Ready.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(cfg.ProbeAfter):
	}
	if before, err = readServer(ctx, st.ServerMetrics); err != nil {
		return rep, err
	}
	busyFrom := time.Now()
	busy, err := probe(ctx, cfg, st, stem+"_rb", orderBase, cfg.BusyProbes, cfg.BusyEvery)
	if err != nil {
		return rep, fmt.Errorf("probes during the drain: %w", err)
	}
	commits.markStalls(&busy)
	if after, err = readServer(ctx, st.ServerMetrics); err != nil {
		return rep, err
	}
	rep.BusyServer = window(before, after)
	if err := awaitProcessed(ctx, st, "order-placed", backlog); err != nil {
		return rep, fmt.Errorf("drain: %w", err)
	}
	var last time.Time
	if err := st.Pool.QueryRow(ctx, `SELECT max(processed_at) FROM processed_messages WHERE consumer = 'order-placed' AND message_id = ANY($1)`,
		backlog).Scan(&last); err != nil {
		return rep, err
	}
	// Only the probes sent while the backlog lasted were behind it.
	busy, rep.BusyFirst = busy.before(last)
	rep.BusyCommits = commits.stats(busyFrom, last)
	if len(busy.total) == 0 {
		return rep, fmt.Errorf("the backlog of %d was processed before the first refund probe was sent: no probe ran behind it", cfg.Backlog)
	}
	rep.BusyProbes, rep.BusyEvery = len(busy.total), cfg.BusyEvery
	settled := busy.sentFrom(RestartSettle - cfg.ProbeAfter)
	rep.BusySettledProbes, rep.BusySettledP99 = len(settled.total), p99(settled.total)
	rep.BusyP99 = p99(busy.total)
	rep.BusyIntakeP99, rep.BusyWorkP99 = p99(busy.intake), p99(busy.work)
	rep.BusyStartP99, rep.BusyRefundP99, rep.BusyReceiptP99 = p99(busy.start), p99(busy.refund), p99(busy.receipt)
	rep.BusyCreatedP99, rep.BusyTaskP99 = p99(busy.created), p99(busy.task)
	rep.BusyScheduledP99, rep.BusyDispatchP99 = p99(busy.scheduled), p99(busy.dispatch)
	rep.BusyRegular = len(busy.scheduled)
	rep.BusySlowest, rep.BusyFive = busy.slowest, busy.five()
	rep.BusyMax = slices.Max(busy.total)
	rep.BusyMaxAt = busy.sentAt[slices.Index(busy.total, rep.BusyMax)]
	rep.IdleP50, rep.BusyP50 = p50(idle.total), p50(busy.total)
	// Against the idle probes sent first, as many as counted here.
	base := idleDrain.first(len(busy.total))
	rep.IdleDrainP99, rep.IdleDrainP50 = p99(base), p50(base)
	rep.IdleDrainToRefundP99 = p99(idleDrain.firstProbes(len(busy.total)).toRefund)
	rep.BusyToRefundP99 = p99(busy.toRefund)
	rep.IdleDrainFive = idleDrain.firstProbes(len(busy.total)).five()
	rep.BusySlow, rep.BusySlowStalled = busy.stalled(2 * rep.DrainBaseline())
	rep.Drained = last.Sub(back)
	rep.Rate = float64(cfg.Backlog) / rep.Drained.Seconds()
	s1, g1, err := st.simStats(ctx)
	if err != nil {
		return rep, fmt.Errorf("the simulators' counts after the drain: %w", err)
	}
	rep.Requests = s1.Requests - s0.Requests + g1.Requests - g0.Requests
	rep.TooMany = s1.RateLimited - s0.RateLimited + g1.RateLimited - g0.RateLimited
	if rep.Requests > 0 {
		rep.TooManyShare = float64(rep.TooMany) / float64(rep.Requests)
	}
	var oldestKey float64
	if err := st.Pool.QueryRow(ctx, `
		SELECT coalesce(max(extract(epoch FROM e.updated_at - e.created_at)), 0)
		  FROM effects e WHERE e.consumer = 'order-placed' AND e.message_id = ANY($1) AND e.state = 'succeeded'`,
		backlog).Scan(&oldestKey); err != nil {
		return rep, err
	}
	rep.OldestKey = time.Duration(oldestKey * float64(time.Second))
	rep.OldestMessage = last.Sub(publishedAt)
	if rep.AttemptsPerCharge, err = chargeAttempts(ctx, st, backlog); err != nil {
		return rep, err
	}
	for _, id := range backlog {
		switch n := s1.ChargesByMessage[id]; {
		case n == 1:
			rep.Charges++
		case n > 1:
			rep.Charges += n
			rep.DoubleCharges++
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s charged %d times", id, n))
		}
	}
	if rep.Charges != cfg.Backlog {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d charges for %d messages", rep.Charges, cfg.Backlog))
	}
	cfg.Logf("drain: %s", strings.TrimSpace(rep.String()))
	return rep, nil
}

// burst publishes cfg.Burst orders at once with the workers running and
// times cfg.Probes refunds beside them (the warm-up orders' second
// refunds).
func burst(ctx context.Context, cfg DrainConfig, st DrainStack, stem string, orderBase int64, commits *commitProbe, rep *DrainReport) error {
	ids := make([]string, cfg.Burst)
	base := orderBase + int64(cfg.Probes+cfg.Backlog)
	before, err := readServer(ctx, st.ServerMetrics)
	if err != nil {
		return err
	}
	at := time.Now()
	published := make(chan error, 1)
	if cfg.BurstRate > 0 {
		go func() {
			every := time.Duration(float64(time.Second) / cfg.BurstRate)
			var err error
			for i := range ids {
				ids[i] = fmt.Sprintf("%s_b%04d", stem, i)
				if err = st.Send(ctx, orderMsg(ids[i], base+int64(i))); err != nil {
					break
				}
				time.Sleep(time.Until(at.Add(time.Duration(i+1) * every)))
			}
			published <- err
		}()
	} else {
		if err := parallel(ctx, 16, len(ids), func(i int) error {
			ids[i] = fmt.Sprintf("%s_b%04d", stem, i)
			return st.Send(ctx, orderMsg(ids[i], base+int64(i)))
		}); err != nil {
			return err
		}
		published <- nil
	}
	lat, err := probe(ctx, cfg, st, stem+"_rf", orderBase, cfg.Probes, cfg.ProbeEvery)
	if err != nil {
		return err
	}
	if err := <-published; err != nil {
		return fmt.Errorf("publish the burst: %w", err)
	}
	after, err := readServer(ctx, st.ServerMetrics)
	if err != nil {
		return err
	}
	if err := awaitProcessed(ctx, st, "order-placed", ids); err != nil {
		return err
	}
	var last time.Time
	if err := st.Pool.QueryRow(ctx, `SELECT max(processed_at) FROM processed_messages WHERE consumer = 'order-placed' AND message_id = ANY($1)`, ids).Scan(&last); err != nil {
		return err
	}
	rep.BurstServer = window(before, after)
	rep.BurstCommits = commits.stats(at, last)
	commits.markStalls(&lat)
	// Only the probes sent while the burst lasted show its effect.
	var beside, besideToRefund []time.Duration
	for i, t := range lat.total {
		if lat.sent[i].Before(last) {
			beside = append(beside, t)
			if len(lat.toRefund) == len(lat.total) {
				besideToRefund = append(besideToRefund, lat.toRefund[i])
			}
		}
	}
	rep.BurstToRefundP99 = p99(besideToRefund)
	if len(beside) == 0 {
		return fmt.Errorf("the burst of %d was processed before the first refund probe was sent: no probe ran beside it", cfg.Burst)
	}
	rep.BurstProbes = len(beside)
	rep.BurstP99, rep.BurstP50, rep.BurstMax = p99(beside), p50(beside), slices.Max(beside)
	rep.BurstDrained = last.Sub(at)
	rep.BurstStartP99, rep.BurstRefundP99, rep.BurstReceiptP99 = p99(lat.start), p99(lat.refund), p99(lat.receipt)
	rep.BurstTaskP99, rep.BurstScheduledP99, rep.BurstDispatchP99 = p99(lat.task), p99(lat.scheduled), p99(lat.dispatch)
	rep.BurstRegular = len(lat.scheduled)
	rep.BurstSlowest, rep.BurstFive = lat.slowest, lat.five()
	return nil
}

func orderMsg(id string, orderID int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"drain@example.com","payment_method":"pm_card_visa"}}`, id, orderID)
}

// latencies are the probes' latencies: publication to record (total), to
// the inbox row (intake), and inbox row to record (work).
type latencies struct {
	total, intake, work, start, created, task, refund, receipt []time.Duration
	// toRefund is publication to the refund's record's commit, without the
	// receipt (total goes on to the receipt's).
	toRefund []time.Duration
	// toTask, toStripe and atStripe split refund (DrainStack.RefundCall):
	// from the claim to the workflow's first task (0 when the refund was
	// claimed in that task; a claim at intake precedes the workflow), from
	// the later of the two to Stripe's receipt of the call, and Stripe's
	// answer; the rest of refund is from the answer to the record. nil
	// without the split.
	toTask, toStripe, atStripe []time.Duration
	// scheduled and dispatch are only the probes whose refund ran as a
	// regular activity.
	scheduled, dispatch []time.Duration
	sentAt              []time.Duration // from the first probe's publication
	// commit is, for each probe, the longest synchronous commit of the
	// commit probe that overlapped it (commitProbe.markStalls); nil
	// without.
	commit []time.Duration
	sent   []time.Time // when each of total was published
	// slowest is the timeline of the probe with the longest total, sent at
	// slowestSent.
	slowest     string
	slowestSent time.Time
}

// before keeps the probes sent before t (scheduled and dispatch, which
// are the regular refunds', all of them), and slowest if its probe is
// kept; first is the latency of the first probe sent.
func (l latencies) before(t time.Time) (kept latencies, first time.Duration) {
	var idx []int
	for i, at := range l.sent {
		if l.sentAt[i] == 0 {
			first = l.total[i]
		}
		if at.Before(t) {
			idx = append(idx, i)
		}
	}
	kept = l.keep(idx)
	kept.scheduled, kept.dispatch = l.scheduled, l.dispatch
	if l.slowestSent.Before(t) {
		kept.slowest, kept.slowestSent = l.slowest, l.slowestSent
	}
	return kept, first
}

// firstProbes is l's n probes sent first (all when fewer).
func (l latencies) firstProbes(n int) latencies {
	order := make([]int, len(l.total))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(l.sentAt[a], l.sentAt[b]) })
	return l.keep(order[:min(n, len(order))])
}

// keep is l's probes at idx, in that order (not the regular refunds'
// scheduled and dispatch, nor slowest). A series not read for every probe
// is left out.
func (l latencies) keep(idx []int) latencies {
	pick := func(s []time.Duration) []time.Duration {
		if len(s) != len(l.total) {
			return nil
		}
		out := make([]time.Duration, 0, len(idx))
		for _, i := range idx {
			out = append(out, s[i])
		}
		return out
	}
	kept := latencies{total: pick(l.total), intake: pick(l.intake), work: pick(l.work), start: pick(l.start), created: pick(l.created),
		task: pick(l.task), refund: pick(l.refund), receipt: pick(l.receipt), sentAt: pick(l.sentAt), commit: pick(l.commit),
		toTask: pick(l.toTask), toStripe: pick(l.toStripe), atStripe: pick(l.atStripe), toRefund: pick(l.toRefund)}
	if len(l.sent) == len(l.total) {
		for _, i := range idx {
			kept.sent = append(kept.sent, l.sent[i])
		}
	}
	return kept
}

// sentFrom is l's probes sent d or more after the first (all when d is
// not above 0).
func (l latencies) sentFrom(d time.Duration) latencies {
	var idx []int
	for i, at := range l.sentAt {
		if at >= d {
			idx = append(idx, i)
		}
	}
	return l.keep(idx)
}

// first is the total latencies of the n probes sent first (all when fewer).
func (l latencies) first(n int) []time.Duration { return l.firstProbes(n).total }

// five renders the five slowest probes as "latency at sent", slowest
// first, the sending time counted from the first probe's, each split (when
// the split was read) into publication to inbox row, to the refund's
// claim, to its record, and to the receipt's record, and with the
// longest synchronous commit of the commit probe meanwhile, if one ran.
func (l latencies) five() string {
	order := make([]int, len(l.total))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(l.total[b], l.total[a]) })
	parts := make([]string, 0, 5)
	for _, i := range order[:min(5, len(order))] {
		part := fmt.Sprintf("%s at %s", l.total[i].Round(time.Millisecond), l.sentAt[i].Round(10*time.Millisecond))
		if len(l.receipt) == len(l.total) {
			split := ""
			if len(l.atStripe) == len(l.total) && len(l.toTask) == len(l.total) {
				split = fmt.Sprintf(" [to its task %d, to stripe %d, stripe %d, to the record %d]", l.toTask[i].Milliseconds(),
					l.toStripe[i].Milliseconds(), l.atStripe[i].Milliseconds(), (l.refund[i] - l.toTask[i] - l.toStripe[i] - l.atStripe[i]).Milliseconds())
			}
			part += fmt.Sprintf(" (inbox %d, claim %d, refund %d%s, receipt %d ms)", l.intake[i].Milliseconds(), l.start[i].Milliseconds(),
				l.refund[i].Milliseconds(), split, l.receipt[i].Milliseconds())
		}
		if len(l.commit) == len(l.total) && l.commit[i] > 0 {
			part += fmt.Sprintf(" [a commit meanwhile %s]", l.commit[i].Round(100*time.Microsecond))
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// stamp is one moment of a probe's timeline.
type stamp struct {
	what string
	at   time.Time
}

// timeline renders stamps as offsets from from, in order.
func timeline(from time.Time, stamps []stamp) string {
	slices.SortStableFunc(stamps, func(a, b stamp) int { return a.at.Compare(b.at) })
	parts := make([]string, 0, len(stamps))
	for _, s := range stamps {
		parts = append(parts, fmt.Sprintf("+%dms %s", s.at.Sub(from).Milliseconds(), s.what))
	}
	return strings.Join(parts, ", ")
}

// eventStamp names a history event for a timeline: its type
// (WorkflowTaskStarted), and the task queue a task was scheduled on.
func eventStamp(ev *historypb.HistoryEvent) stamp {
	what := ev.GetEventType().String()
	if q := ev.GetWorkflowTaskScheduledEventAttributes().GetTaskQueue().GetName(); q != "" {
		what += " (" + q + ")"
	}
	if q := ev.GetActivityTaskScheduledEventAttributes().GetTaskQueue().GetName(); q != "" {
		what += " (" + q + ")"
	}
	return stamp{what: what, at: ev.GetEventTime().AsTime()}
}

// probe publishes n refunds of the warm-up orders (cfg.Probes of them, in
// turn), one every every, and returns their latencies.
func probe(ctx context.Context, cfg DrainConfig, st DrainStack, stem string, orderBase int64, n int, every time.Duration) (latencies, error) {
	var out latencies
	ids := make([]string, n)
	sent := make(map[string]time.Time, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%03d", stem, i)
		raw := fmt.Appendf(nil, `{"id":%q,"type":"order.refund_requested","data":{"order_id":%d,"amount":10,"reason":"requested_by_customer"}}`, ids[i], orderBase+int64(i%cfg.Probes))
		sent[ids[i]] = time.Now()
		if err := st.SendRefund(ctx, raw); err != nil {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(every):
		}
	}
	if err := awaitProcessed(ctx, st, "order-refund", ids); err != nil {
		return out, err
	}
	if st.watch != nil {
		if err := st.watch.await(ctx, ids, 30*time.Second); err != nil {
			return out, err
		}
	}
	rows, err := st.Pool.Query(ctx, `SELECT p.message_id, i.received_at, p.processed_at, r.created_at, r.updated_at, coalesce(m.updated_at, r.updated_at)
		  FROM processed_messages p JOIN inbox i USING (consumer, message_id)
		  JOIN effects r ON r.consumer = p.consumer AND r.message_id = p.message_id AND r.key LIKE 'refund:%'
		  LEFT JOIN effects m ON m.consumer = p.consumer AND m.message_id = p.message_id AND m.key LIKE 'refundemail:%'
		 WHERE p.consumer = 'order-refund' AND p.message_id = ANY($1)`, ids)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var in, at, claimed, refunded, mailed time.Time
		if err := rows.Scan(&id, &in, &at, &claimed, &refunded, &mailed); err != nil {
			return out, err
		}
		// The probe ends when its route is done and others can see it:
		// the later commit of its refund's record and its receipt's
		// (commitWatch); processed_at, its record's statement start,
		// without the watch.
		end, refundEnd := at, at
		if st.watch != nil {
			if p, r, ok := st.watch.committed(id); ok {
				end, refundEnd = p, p
				if r.After(p) {
					end = r
				}
			}
		}
		out.total = append(out.total, end.Sub(sent[id]))
		out.toRefund = append(out.toRefund, refundEnd.Sub(sent[id]))
		out.sentAt = append(out.sentAt, sent[id].Sub(sent[ids[0]]))
		out.sent = append(out.sent, sent[id])
		out.intake = append(out.intake, in.Sub(sent[id]))
		out.work = append(out.work, end.Sub(in))
		out.start = append(out.start, claimed.Sub(in))
		wf, err := identity.WorkflowID("order-refund", id)
		if err != nil {
			return out, err
		}
		var created, task, scheduled, started time.Time
		stamps := []stamp{{"inbox row", in}, {"refund claimed", claimed}, {"refund recorded", refunded}, {"receipt recorded", mailed}, {"processed", at}, {"done (committed)", end}}
		var got, answered time.Time
		var called bool
		if st.RefundCall != nil {
			if got, answered, called = st.RefundCall(id); called {
				stamps = append(stamps, stamp{"stripe received the refund", got}, stamp{"stripe answered", answered})
			}
		}
		for it := st.Temporal.GetWorkflowHistory(ctx, wf, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
			ev, err := it.Next()
			if err != nil {
				return out, fmt.Errorf("history of %s: %w", wf, err)
			}
			stamps = append(stamps, eventStamp(ev))
			if !started.IsZero() {
				continue
			}
			switch at := ev.GetEventTime().AsTime(); ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				created = at
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				task = cmp.Or(task, at)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				scheduled = cmp.Or(scheduled, at)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				started = at
			default:
			}
		}
		if t := end.Sub(sent[id]); t >= slices.Max(out.total) {
			out.slowest = fmt.Sprintf("%s, sent %s into the probes: %s", id, sent[id].Sub(sent[ids[0]]).Round(time.Millisecond), timeline(sent[id], stamps))
			out.slowestSent = sent[id]
		}
		out.created = append(out.created, created.Sub(in))
		out.task = append(out.task, task.Sub(in))
		if called {
			// A claim at intake precedes the workflow's first task; one in
			// the task follows its start.
			from := claimed
			if task.After(claimed) {
				from = task
			}
			out.toTask = append(out.toTask, from.Sub(claimed))
			out.toStripe, out.atStripe = append(out.toStripe, got.Sub(from)), append(out.atStripe, answered.Sub(got))
		}
		if !scheduled.IsZero() { // a regular refund activity: its local attempt failed (or an older release)
			out.scheduled = append(out.scheduled, scheduled.Sub(in))
			out.dispatch = append(out.dispatch, started.Sub(scheduled))
		}
		out.refund = append(out.refund, refunded.Sub(claimed))
		out.receipt = append(out.receipt, mailed.Sub(refunded))
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	if len(out.total) != len(ids) {
		return out, fmt.Errorf("%d of %d refunds have their timings (inbox, processed and refund rows)", len(out.total), len(ids))
	}
	return out, nil
}

// chargeAttempts is the mean number of regular ChargeOrder attempts of 50
// of ids' workflows, spread over ids.
func chargeAttempts(ctx context.Context, st DrainStack, ids []string) (float64, error) {
	var sample []string
	for i := 0; i < len(ids); i += max(1, len(ids)/50) {
		sample = append(sample, ids[i])
	}
	var total int32
	for _, id := range sample {
		wf, err := identity.WorkflowID("order-placed", id)
		if err != nil {
			return 0, err
		}
		for it := st.Temporal.GetWorkflowHistory(ctx, wf, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
			ev, err := it.Next()
			if err != nil {
				return 0, fmt.Errorf("history of %s: %w", wf, err)
			}
			if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
				total += a.GetAttempt()
				break
			}
		}
	}
	return float64(total) / float64(len(sample)), nil
}

// awaitProcessed waits until every id of consumer has its processed row.
func awaitProcessed(ctx context.Context, st DrainStack, consumer string, ids []string) error {
	for {
		var n int
		if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM processed_messages WHERE consumer = $1 AND message_id = ANY($2)`, consumer, ids).Scan(&n); err != nil {
			return err
		}
		if n == len(ids) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d %s messages processed: %w", n, len(ids), consumer, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// parallel runs fn(0..n-1) on k goroutines and returns the first error.
func parallel(ctx context.Context, k, n int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next = make(chan int)
	)
	for range k {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					ferr = cmpErr(ferr, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if ferr == nil {
		ferr = ctx.Err()
	}
	return ferr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// p50 is the median of ds.
func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// p99 is the 99th percentile of ds (nearest rank).
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(0.99*float64(len(s))))-1)]
}
