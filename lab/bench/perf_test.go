package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestParsePerf(t *testing.T) {
	for _, tc := range []struct {
		out, event string
		v          float64
		status     string
	}{
		// perf 6.1's -x, output, as printed here and on a machine with a PMU.
		{"<not supported>,,instructions,0,100.00,,\n", "instructions", 0, "<not supported>"},
		{"<not counted>,msec,task-clock,0,100.00,,\n", "task-clock", 0, "<not counted>"},
		{"1234567,,instructions:u,502000,100.00,0.91,insn per cycle\n", "instructions:u", 1234567, ""},
		{"301.25,msec,task-clock,301250000,100.00,0.999,CPUs utilized\n", "task-clock", 301.25, ""},
		{"12,,cycles,1,100.00,,\n", "instructions", 0, "not in the output"},
	} {
		v, status := parsePerf([]byte(tc.out), tc.event)
		if v != tc.v || status != tc.status {
			t.Errorf("parsePerf(%q, %q) = %v, %q; want %v, %q", tc.out, tc.event, v, status, tc.v, tc.status)
		}
	}
}

// TestPerfCountsAProcess runs the plumbing that counts instructions with
// a software event every machine counts (task-clock, in milliseconds):
// the probe finds it, and perf attached to this process by PID counts the
// CPU it burns between start and stop. Whether instructions themselves
// are countable depends on the machine (a VM may have no PMU); the run's
// report says which it was.
func TestPerfCountsAProcess(t *testing.T) {
	ctx := context.Background()
	if ev, why := probePerf(ctx, "no-such-event", "task-clock"); ev != "task-clock" {
		t.Fatalf("probe: %q (%s), want task-clock", ev, why)
	}
	if ev, why := probePerf(ctx, "no-such-event"); ev != "" || why == "" {
		t.Errorf("probe of an unknown event: %q, %q; want none, and why", ev, why)
	}
	r, err := startPerf("task-clock", map[string][]int{"self": {os.Getpid()}, "none": nil})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches
	busy := time.Now().Add(300 * time.Millisecond)
	for x := 0; time.Now().Before(busy); x++ {
		_ = x * x
	}
	counts, err := r.stop()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := counts["none"]; ok || len(counts) != 1 {
		t.Errorf("counts %v, want one for self only", counts)
	}
	// On a shared machine the spin gets only part of a CPU: at least 50 ms.
	if ms := counts["self"]; ms < 50 || ms > 5000 {
		t.Errorf("task-clock of this process over 300 ms of spinning: %.1f ms", ms)
	}
}
