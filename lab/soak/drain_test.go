package soak

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simlimit"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/cluster"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

var (
	drainBacklog     = flag.Int("drain-backlog", 5000, "messages piled up for TestBacklogDrain")
	drainBurst       = flag.Int("drain-burst", 0, "orders sent at once with the workers warm, beside the refund probes (default 10× the probes, 1000; negative skips the phase)")
	drainSimLimit    = flag.Float64("drain-sim-endpoint", drainSimEndpoint, "the simulators' limit per Stripe endpoint and SendGrid key (Stripe's global: 4×)")
	drainWorkerLimit = flag.Float64("drain-endpoint", drainEndpoint, "the workers' STRIPE_ENDPOINT_RATE_LIMIT and SENDGRID_RATE_LIMIT (STRIPE_RATE_LIMIT: 4×)")
	drainJSON        = flag.String("drain-json", "", "write the drain report as JSON to this file (lab/bench reads it)")
	drainCluster     = flag.Bool("drain-cluster", false, "run the drain on Temporal server v1.29.1 on Postgres (tools/cluster: make bin/temporal-server), one process, 4 history shards, instead of the dev server")
	drainBurstRate   = flag.Float64("drain-burst-rate", 0, "publish the fairness phase's orders at this many per second beside the probes, not at once (how they would enter if the source admitted the route at its start rate)")
	drainProbeAfter  = flag.Duration("drain-probe-after", 0, "start the refund probes this long after the workers come back (default: at once)")
	drainStartRate   = flag.String("drain-start-rate", "auto", "the workers' EFFECTIVELY_START_RATE")
	drainStartAhead  = flag.String("drain-start-ahead", "", "the workers' EFFECTIVELY_START_AHEAD (default: the worker's; 0 turns the hold off)")
	drainDevConfig   = flag.String("drain-dev-config", "", "more of the dev server's dynamic config, KEY=VALUE pairs separated by spaces (e.g. history.visibilityProcessorSchedulerWorkerCount=4)")
	drainMatchFair   = flag.Bool("drain-matching-fairness", true, "run the dev server with matching.enableFairness (each route's consumer a fairness key of the workflow task queue)")
	drainWorkerEnv   = flag.String("drain-worker-env", "", "more of the workers' environment, NAME=value pairs separated by spaces (e.g. NATS_HANDLERS=8)")
	drainProbes      = flag.Int("drain-probes", 0, "refund probes per phase (default 100)")
	drainProbeEvery  = flag.Duration("drain-probe-every", 0, "the probes' spacing (default 250ms, less when the fairness phase's orders drain faster than 100 probes, 150ms at 60/s; more under 20/s, where 4 a second would pass a fifth of the limit)")
	drainBusyProbes  = flag.Int("drain-busy-probes", 0, "refund probes during the drain after the outage (default: spread over 90% of its expected time, at least -drain-probes)")
	drainBusyEvery   = flag.Duration("drain-busy-every", 0, "the drain's probes' spacing (default: a twentieth of the limit, 1s at 20/s, never closer than the other probes)")
	drainSimsApart   = flag.Bool("drain-sims-apart", false, "run the simulators as a process of their own (sim/providersim), not in the test's process beside the probes and the publisher")
	drainInfraCPUs   = flag.String("drain-infra-cpus", "", "give the Temporal server, Postgres and NATS these CPUs (e.g. 0) and this test's processes the others while the drain runs, the deployment's shape on one host (root; empty: leave them)")
	drainInfraNice   = flag.Int("drain-infra-nice", 0, "run the Temporal server and Postgres at this nice (e.g. -10) while the drain runs, and the kernel's autogroup off, as if they had cores of their own (root; 0: leave them)")
	drainFair        = flag.Bool("drain-fairness", false, "fail unless the refund route's p99 stays within 2× of its idle p99, and neither idle p99 more than 2× the other (issue 24's fairness target: near it at Stripe's own limits, -drain-sim-endpoint 25 -drain-endpoint 20, met in some runs and not in others on 2 shared cores; missed at the default 60/s; see docs/operations.md)")
)

// The short drain's limits: the simulators answer 429 past Stripe's ratios
// (global 4× an endpoint's), scaled so that 5,000 messages drain in about
// a minute and a half; the workers are configured 20% under them, as
// docs/operations.md advises.
const (
	drainSimEndpoint = 75
	drainEndpoint    = 60
)

// NewDrainStack starts what RunDrain needs: a dev server, the simulators
// with rate limits (Stripe global and per endpoint, SendGrid per key), a
// database, JetStream and the worker binary configured with limits
// (workerEndpoint per Stripe endpoint and for SendGrid, 4× for Stripe's
// global), a JetStream consumer per route, and the dev server's fairness on
// (the routes' fairness keys at its task queues).
func NewDrainStack(t *testing.T, simEndpoint, workerEndpoint float64) DrainStack {
	t.Helper()
	ctx := context.Background()
	tc, address, namespace, metricsURL := drainTemporal(t)
	var sims testenv.Sims
	var simStats func(context.Context) (stripesim.Stats, sendgridsim.Stats, error)
	var calls *StripeCalls
	if *drainSimsApart {
		p := startSimProcess(t, simEndpoint)
		sims.StripeURL, sims.SendGridURL, simStats = p.StripeURL, p.SendGridURL, p.Stats
	} else {
		sims = *testenv.StartSims(t)
		calls = &StripeCalls{Next: sims.Stripe}
		srv := httptest.NewServer(calls)
		t.Cleanup(srv.Close)
		sims.StripeURL = srv.URL
		sims.Stripe.SetRateLimits(stripesim.RateLimits{
			Global:   simlimit.Rate{PerSecond: 4 * simEndpoint},
			Endpoint: simlimit.Rate{PerSecond: simEndpoint},
		})
		sims.SendGrid.SetRateLimit(simlimit.Rate{PerSecond: simEndpoint})
	}
	dbURL := storetest.NewDatabase(t)
	pool, err := store.Open(ctx, dbURL, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	bin, err := workerproc.Build(ctx, testenv.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	orders, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	refunds, err := jetstream.PublishSubject(j.Subject, "order.refund_requested")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string) func(context.Context, []byte) error {
		return func(ctx context.Context, raw []byte) error {
			_, err := j.JS.Publish(ctx, subject, raw)
			return err
		}
	}
	return DrainStack{
		Stack: Stack{
			Temporal: tc, Pool: pool, Stripe: sims.Stripe, SendGrid: sims.SendGrid, WorkerBin: bin,
			Worker: workerproc.Config{
				DatabaseURL: dbURL, TemporalAddress: address, TaskQueue: "effectively-drain",
				StripeURL: sims.StripeURL, SendGridURL: sims.SendGridURL, NATSURL: testenv.NATSURL(),
				Extra: append([]string{
					"LOG_LEVEL=warn", "TEMPORAL_NAMESPACE=" + namespace,
					// The production defaults, not the tests' short ones: a
					// regular attempt waits for its slot at the limit up to
					// its start-to-close less a margin, and the limiter, the
					// claims and the records share the pool.
					"PAYMENT_START_TO_CLOSE=2m", "EMAIL_START_TO_CLOSE=1m", "DATABASE_MAX_CONNS=32",
					"NATS_STREAM=" + j.Stream, "NATS_SUBJECT=" + j.Subject, "NATS_CONSUMER=drain", "NATS_CONSUMER_PER_ROUTE=true", "EFFECTIVELY_EFFECT_QUEUE_PER_ROUTE=true",
					"NATS_EVENTS_STREAM=" + j.EventsStream, "NATS_EVENTS_PREFIX=" + j.EventsPrefix,
					"EFFECTIVELY_START_RATE=" + *drainStartRate, "EFFECTIVELY_START_AHEAD=" + *drainStartAhead,
					fmt.Sprintf("STRIPE_RATE_LIMIT=%g", 4*workerEndpoint),
					fmt.Sprintf("STRIPE_ENDPOINT_RATE_LIMIT=%g", workerEndpoint),
					fmt.Sprintf("SENDGRID_RATE_LIMIT=%g", workerEndpoint),
				}, strings.Fields(*drainWorkerEnv)...),
			},
			Send: publish(orders),
		},
		SendRefund:    publish(refunds),
		ServerMetrics: metricsURL,
		SimStats:      simStats,
		RefundCall:    calls.Refund,
	}
}

// drainTemporal starts the drain's Temporal: the dev server with the
// matching service's fairness on and its metrics served (their URL is
// returned), or with -drain-cluster the server built from source on the
// local Postgres, its namespace and search attributes registered as
// `worker setup` does.
func drainTemporal(t *testing.T) (tc client.Client, address, namespace, metrics string) {
	t.Helper()
	if !*drainCluster {
		srv, metrics := testenv.StartTemporalWithMetrics(t, *drainMatchFair, strings.Fields(*drainDevConfig)...)
		return srv.Client(), srv.FrontendHostPort(), "default", metrics
	}
	namespace = "drain"
	c, tc := startCluster(t, cluster.Options{Database: "temporal_drain", Namespace: namespace})
	if err := temporalclient.EnsureSearchAttributes(context.Background(), tc, namespace, workflows.SearchAttributeKeys()); err != nil {
		t.Fatal(err)
	}
	return tc, c.Address(), namespace, ""
}

// TestBacklogDrain is the short backlog drain of `make soak` (issue 24):
// 5,000 messages pile up with the workers stopped; brought back, they drain
// at the configured limit with under 1% 429s from the rate-limited
// simulators, no double charge, every key used well inside Stripe's 24 h.
// Before the outage, with the workers warm, 1,000 orders come at once beside
// the refund probes. No refund may take longer than WaitBound beside
// either backlog. The refund route's p99 against its idle p99 (the
// fairness target, 2×), beside those 1,000 and behind the 5,000, is
// reported; -drain-fairness makes it fail the test (near 2× at Stripe's own
// limits, which make bench runs, met in some runs and not in others; missed
// at this test's default 60/s on 2 cores).
func TestBacklogDrain(t *testing.T) {
	st := NewDrainStack(t, *drainSimLimit, *drainWorkerLimit)
	if *drainInfraNice != 0 {
		stop, err := PrioritizeInfra(*drainInfraNice)
		if err != nil {
			t.Fatalf("-drain-infra-nice: %v", err)
		}
		t.Cleanup(stop)
		t.Logf("drain: the Temporal server and Postgres run at nice %d, autogroup off", *drainInfraNice)
	}
	if *drainInfraCPUs != "" {
		var cpus []int
		for _, f := range strings.Split(*drainInfraCPUs, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("-drain-infra-cpus %q: %v", *drainInfraCPUs, err)
			}
			cpus = append(cpus, c)
		}
		stop, err := SeparateInfra(cpus)
		if err != nil {
			t.Fatalf("-drain-infra-cpus: %v", err)
		}
		t.Cleanup(stop)
		t.Logf("drain: the Temporal server, Postgres and NATS run on CPUs %v, this test's processes on the others", cpus)
	}
	rep, err := RunDrain(context.Background(), DrainConfig{Probes: *drainProbes, ProbeEvery: *drainProbeEvery, Backlog: *drainBacklog, Burst: *drainBurst, BurstRate: *drainBurstRate, Limit: *drainWorkerLimit, ProbeAfter: *drainProbeAfter,
		BusyProbes: *drainBusyProbes, BusyEvery: *drainBusyEvery, Logf: t.Logf}, st)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "backlog drain report:\n%s", rep)
	if *drainJSON != "" {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*drainJSON, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range rep.Violations {
		t.Error(v)
	}
	if rep.TooManyShare >= 0.01 {
		t.Errorf("429s were %.2f%% of the requests, want under 1%%", 100*rep.TooManyShare)
	}
	if rep.Rate > 1.1*rep.Limit {
		t.Errorf("drained at %.1f msg/s, above the configured %.0f", rep.Rate, rep.Limit)
	}
	for _, w := range rep.Waits() {
		t.Errorf("the refunds waited behind the orders' backlog: %s", w)
	}
	if rep.OldestKey >= 23*time.Hour {
		t.Errorf("a payment key was used %s after its first claim: past Stripe's window", rep.OldestKey)
	}
	report := t.Logf
	if *drainFair {
		report = t.Errorf
	}
	if rep.Burst > 0 && !rep.BurstCounts() {
		report("FAIRNESS TARGET NOT SHOWN beside the burst (checked with -drain-fairness): its idle p99 %s is more than 2× the other idle series' %s: a ratio against it may flatter",
			rep.IdleP99, rep.IdleDrainP99)
	}
	if !rep.DrainCounts() {
		report("FAIRNESS TARGET NOT SHOWN after the outage (checked with -drain-fairness): its idle p99 %s is more than 2× the other idle series' %s: a ratio against it may flatter",
			rep.DrainBaseline(), rep.IdleP99)
	}
	if rep.Burst > 0 && rep.BurstRatio() > 2 {
		report("FAIRNESS TARGET NOT MET (checked with -drain-fairness): the refund route's p99 went from %s idle to %s beside %d orders sent at once (%.1f×, want ≤ 2×)",
			rep.IdleP99, rep.BurstP99, rep.Burst, rep.BurstRatio())
	}
	if rep.Ratio() > 2 {
		report("FAIRNESS TARGET NOT MET (checked with -drain-fairness): the refund route's p99 went from %s idle to %s behind the backlog after the outage (%.1f×, want ≤ 2×)",
			rep.DrainBaseline(), rep.BusyP99, rep.Ratio())
	}
}
