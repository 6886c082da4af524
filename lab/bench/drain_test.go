package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/lab/soak"
)

// TestDrainTargets: the drain's rows of the targets table are met or
// missed by the report's own figures, and absent without a drain.
func TestDrainTargets(t *testing.T) {
	if got := (*DrainPhase)(nil).targets(); got != nil {
		t.Fatalf("no drain: %+v, want no rows", got)
	}
	rep := &soak.DrainReport{Backlog: 10000, Burst: 1000, BurstProbes: 100, Requests: 30000, TooMany: 3, TooManyShare: 0.0001, Rate: 20, Limit: 20,
		IdleP99: 20 * time.Millisecond, BurstP99: 39 * time.Millisecond, BusyP99: 41 * time.Millisecond}
	got := (&DrainPhase{Report: rep}).targets()
	if len(got) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(got), got)
	}
	for i, want := range []bool{true, true, true, false} {
		if got[i].Met != want {
			t.Errorf("%s: met %v, want %v (%s)", got[i].What, got[i].Met, want, got[i].Measured)
		}
	}
	// Against the drain's own baseline (as many idle probes as far apart).
	rep.IdleDrainP99 = 25 * time.Millisecond
	if got = (&DrainPhase{Report: rep}).targets(); !got[3].Met || !strings.Contains(got[3].Measured, "against 25ms idle") {
		t.Errorf("41ms against 25ms: %+v, want met against the drain's baseline", got[3])
	}
	// A baseline inflated by an idle phase that was not quiet (more than
	// 2× the other idle series) does not count: the burst's 39ms against
	// 60ms would read 0.65×, the drain's 41ms against 60ms 0.68×.
	rep.IdleP99 = 60 * time.Millisecond
	if got = (&DrainPhase{Report: rep}).targets(); got[1].Met || !got[3].Met {
		t.Errorf("idle p99s 60ms and 25ms: %+v, %+v, want the burst's row missed, the drain's met", got[1], got[3])
	}
	rep.IdleP99, rep.IdleDrainP99 = 20*time.Millisecond, 60*time.Millisecond
	if got = (&DrainPhase{Report: rep}).targets(); !got[1].Met || got[3].Met {
		t.Errorf("idle p99s 20ms and 60ms: %+v, %+v, want the burst's row met, the drain's missed", got[1], got[3])
	}
	rep.IdleDrainP99 = 25 * time.Millisecond
	rep.BusyFirst = 4 * time.Second
	if got = (&DrainPhase{Report: rep}).targets(); got[2].Met {
		t.Errorf("the first probe after the outage took 4s: %+v, want the wait bound missed", got[2])
	}
	rep.TooMany, rep.TooManyShare, rep.Burst = 300, 0.01, 0
	got = (&DrainPhase{Report: rep}).targets()
	if len(got) != 3 || got[0].Met {
		t.Errorf("1%% 429s and no burst: %+v, want the 429s missed and no fairness row", got)
	}
}
