package bench

import (
	"context"
	"strings"
	"testing"
)

func TestRoundsPairAdjacentFloors(t *testing.T) {
	res := func(rate, cpuServer, cpuWorker float64, n int) Result {
		return Result{Throughput: rate, Unique: n, CPU: CPU{Server: cpuServer, Worker: cpuWorker}}
	}
	r := Report{
		// Floors of 100, 80 and 60 workflows/s; e2e runs of 45 and 42
		// messages/s: ratios 45/90 = 0.5 and 42/70 = 0.6.
		Floors:    []Result{res(100, 1, 0, 100), res(80, 1.2, 0, 100), res(60, 1.4, 0, 100)},
		E2ERounds: []Result{res(45, 2.2, 0.5, 100), res(42, 2.6, 0.5, 100)},
	}
	// Other tenants' CPU during a run is not the run's cost.
	r.E2ERounds[0].CPU.Other = 3
	r.evaluate()
	near := func(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }
	if len(r.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(r.Rounds))
	}
	for i, want := range []float64{0.5, 0.6} {
		if got := r.Rounds[i].Ratio; !near(got, want) {
			t.Errorf("round %d: ratio %.4f, want %.2f", i+1, got, want)
		}
	}
	// CPU per message: e2e 27 ms over the floors' mean of 11 ms, then 31
	// over 13; the dev server's 22 over 11, 26 over 13.
	if x := r.Rounds[0]; !near(x.E2ECPU, 27) || !near(x.FloorCPU, 11) || !near(x.Server, 22) || !near(x.FloorServer, 11) {
		t.Errorf("round 1 CPU: %+v", x)
	}
	if s := r.RatioSpread; s.N != 2 || !near(s.Min, 0.5) || !near(s.Max, 0.6) || !near(s.Median, 0.55) {
		t.Errorf("ratio spread %+v", s)
	}
	if r.E2EOverFloor != r.RatioSpread.Median || r.Targets[0].Met {
		t.Errorf("e2e / floor %.3f, target %+v", r.E2EOverFloor, r.Targets[0])
	}
	if tg := r.Targets[1]; !near(tg.Value, 2) || tg.Met {
		t.Errorf("dev server target %+v, want 2× (22/11 and 26/13), missed", tg)
	}
	if s := spreadOf([]float64{3, 1, 2}); s.Median != 2 || s.Min != 1 || s.Max != 3 {
		t.Errorf("spread of 3 values: %+v", s)
	}
}

// TestReportBeforeTheSeries renders a report of the older layout (one e2e
// run between two floors, no Floors) as a series of one round.
func TestReportBeforeTheSeries(t *testing.T) {
	r := Report{
		Floor:    Result{Throughput: 100, Unique: 100, CPU: CPU{Server: 1}},
		E2E:      Result{Throughput: 60, Unique: 100, CPU: CPU{Server: 2}},
		FloorEnd: Result{Throughput: 200, Unique: 100, CPU: CPU{Server: 1}},
	}
	r.evaluate()
	if len(r.Rounds) != 1 || r.Rounds[0].Ratio < 0.4-1e-9 || r.Rounds[0].Ratio > 0.4+1e-9 {
		t.Fatalf("rounds %+v, want one of 0.4 (60 / 150)", r.Rounds)
	}
	md := r.Markdown("")
	for _, want := range []string{"| Temporal floor 1 |", "| e2e 1 (JetStream → worker → effects) |", "| Temporal floor 2 |", "0.40× median (min 0.40, max 0.40, 1 pair)",
		"Round 1's floors differ by 2.0×"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// TestRunRefusesAnUnknownCompression: the worker would exit on it, the
// reference clients would fall back to gzip; Run refuses it before
// starting anything.
func TestRunRefusesAnUnknownCompression(t *testing.T) {
	_, err := Run(context.Background(), Config{GrpcCompression: "zstd"})
	if err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_GRPC_COMPRESSION") {
		t.Fatalf("err = %v, want one naming the variable", err)
	}
}

func TestKneeIsReadOverTheFloorsBeside(t *testing.T) {
	pt := func(inFlight int, rate, floors float64) Result {
		return Result{InFlight: inFlight, Throughput: rate, FloorBeside: floors}
	}
	// Raw rates peak at in-flight 32, but the machine was faster then: over
	// their floors, 16 is within 5% of the best (0.80 against 0.82).
	sweep := []Result{pt(8, 60, 100), pt(16, 80, 100), pt(32, 90, 110), pt(128, 85, 120)}
	if k := knee(sweep); k != 16 {
		t.Fatalf("knee %d, want 16 (over their floors: 0.60, 0.80, 0.82, 0.71)", k)
	}
	// Order does not matter, and a point past the best that still holds
	// does not move the knee up.
	if k := knee([]Result{sweep[3], sweep[2], sweep[0], sweep[1]}); k != 16 {
		t.Fatalf("unordered sweep: knee %d, want 16", k)
	}
	if k := knee([]Result{pt(8, 50, 100), pt(16, 80, 100)}); k != 16 {
		t.Fatalf("knee %d, want 16 when 8 is far below", k)
	}
	if k := knee(nil); k != 0 {
		t.Fatalf("no sweep: knee %d", k)
	}
}
