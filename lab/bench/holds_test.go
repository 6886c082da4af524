package bench

import (
	"strings"
	"testing"
	"time"
)

// TestHoldsNamesWhatTheE2EAdds checks the missed targets' section against
// figures worked out by hand.
func TestHoldsNamesWhatTheE2EAdds(t *testing.T) {
	// 100 workflows and 100 messages a run. The floors: 1 s of dev server
	// and 0.2 s of harness each, 12 ms a workflow. The e2e: 1.2 s of dev
	// server, 0.4 s of worker, 0.3 s of Postgres, 0.1 s of NATS and 0.2 s
	// of harness, 22 ms a message.
	floor := Result{Throughput: 100, Unique: 100, CPU: CPU{Server: 1, Harness: 0.2, MachineBusy: 0.9}}
	e2e := Result{Throughput: 50, Unique: 100, CPU: CPU{Server: 1.2, Worker: 0.4, Postgres: 0.3, NATS: 0.1, Harness: 0.2, MachineBusy: 0.95}}
	r := Report{Floors: []Result{floor, floor}, E2ERounds: []Result{e2e}}
	r.ServerProfile = &ServerProfile{E2E: map[string]float64{"visibility: the start's record": 20}, Floor: map[string]float64{"visibility: the start's record": 10}}
	r.evaluate()
	s := r.holdsSection()
	for _, want := range []string{
		"The rate ratio, 0.50×",
		"22.0 ms per e2e message and 12.0 ms per floor workflow",
		"0.8× allows 15.0 ms per message, 7.0 ms less",
		// The worker's 4 ms first, then Postgres 3, the dev server 2, NATS 1.
		"worker(s) 4.00 ms (40%), Postgres 3.00 ms (30%), dev server 2.00 ms (20%), NATS 1.00 ms (10%)",
		// 12 × 20% against 10 × 10%; (12 − 1.4) / 10.
		"about 2.40 ms against 1.00 ms. Over every round the dev server spent 2.00 ms more", "the floor's does, 1.06×",
		// 12 / (22 − 2), 12 / (22 − 8), 12 / (22 − 10).
		"a floor workflow: 0.60×", "machines of its own: 0.86×", "(1.20× the floor's here) bounds the ratio at 0.83×", "both: 1.00×",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "p99") {
		t.Errorf("section speaks of a p99 it was not given:\n%s", s)
	}

	// The p99: a paced e2e that did not keep up, beside a floor that met it.
	r.Paced = &Result{TargetRate: 80, Throughput: 60, Latency: Latency{P99: 400 * time.Millisecond},
		Stages: &Stages{Intake: Latency{P99: 20 * time.Millisecond}, Start: Latency{P99: 350 * time.Millisecond}, Effects: Latency{P99: 40 * time.Millisecond}}}
	r.PacedFloor = &Result{TargetRate: 120, Throughput: 120, Latency: Latency{P50: 20 * time.Millisecond, P99: 110 * time.Millisecond}}
	s = r.holdsSection()
	for _, want := range []string{
		"did not keep up", "The longest tail is the start", "p99 of 110 ms", "leaving 40 ms of the 150", "it added 290 ms",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	// A floor that misses it too says the target holds for no code here.
	r.PacedFloor.Latency.P99 = 180 * time.Millisecond
	if s = r.holdsSection(); !strings.Contains(s, "holds for no code on this machine") {
		t.Errorf("a floor over the target is not named:\n%s", s)
	}

	// Met targets: no section. (The dev server's target needs its profile
	// to be split.)
	r.Paced.Latency.P99 = 100 * time.Millisecond
	r.E2EOverFloor = 0.85
	if s = r.holdsSection(); !strings.Contains(s, "The dev server's CPU per message, 1.20× the floor's (the rounds' median; 1.20× over every round") || strings.Contains(s, "rate ratio") {
		t.Errorf("only the dev server's target missed, section:\n%s", s)
	}
	r.ServerProfile = nil
	if s = r.holdsSection(); s != "" {
		t.Errorf("targets met, section:\n%s", s)
	}
}

func TestHoldsNamesTheWaitersRSS(t *testing.T) {
	r := Report{WorkerPeakRSSMB: 157.6, WorkerPeakRSSBeforeHTTPMB: 76.2,
		HTTP: &HTTPPhase{Waiters: 1000, RSSMBBefore: 71, RSSMBDuring: 124, GoroutinesBefore: 200, GoroutinesDuring: 2200}}
	s := r.holdsSection()
	// (124 − 71) × 1024 / 1000 = 54 KB and (2200 − 200) / 1000 = 2
	// goroutines a waiter; the peak 157.6 − 124 = 34 MB above.
	for _, want := range []string{"157.6 MB (wanted ≤ 150 MB)", "peaked at 76.2 MB", "from 71 to 124 MB while they waited (about 54 KB and 2.0 goroutines each", "peak was 34 MB above"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	r.WorkerPeakRSSMB = 140
	if s := r.holdsSection(); s != "" {
		t.Errorf("RSS within the target, section:\n%s", s)
	}
}

func TestHoldsWithTheDevServerOnItsOwnCPUs(t *testing.T) {
	// 2 CPUs, one each side. A floor workflow costs the dev server 8 ms
	// (125/s); an e2e message 10 ms there (100/s) and 5 ms on the other side
	// (200/s): the dev server's side bounds it, at 0.80×.
	floor := Result{Throughput: 100, Unique: 100, CPU: CPU{Server: 0.8}}
	e2e := Result{Throughput: 70, Unique: 100, CPU: CPU{Server: 1.0, Worker: 0.3, Postgres: 0.2}}
	r := Report{Floors: []Result{floor, floor}, E2ERounds: []Result{e2e}}
	r.Config.TemporalCPUs, r.Environment.CPUs = CPUsOwn, 2
	r.evaluate()
	s := r.holdsSection()
	for _, want := range []string{"on 1 CPU(s) of its own and everything else on 1", "cost the dev server 8.00 ms (a bound of 125/s", "10.00 ms (100/s) and the other side 5.00 ms (200/s)", "bound by the dev server's side, at 0.80×"} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "follows the CPU it costs") {
		t.Errorf("the shared layout's reading in the own layout:\n%s", s)
	}
}
