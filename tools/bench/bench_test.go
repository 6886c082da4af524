package bench

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTinyRun runs the whole benchmark at a tiny size — every phase, one
// sweep point and the half-rate point, nothing skipped — to check that the
// harness works and that nothing was charged twice. The numbers of so small
// a run mean nothing; only their presence is checked.
func TestTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := Config{
		Messages: 100, InFlight: 16, Sweep: []int{16}, SweepMessages: 60,
		FloorWorkflows: 50, NaiveWorkflows: 30, PlainMessages: 300, PlainClients: 4,
		DuplicateBurst: 100, Warmup: 5, Stall: 30 * time.Second, Timeout: 150 * time.Second,
		Logf: t.Logf,
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.DoubleCharges != 0 {
		t.Errorf("%d messages charged more than once", rep.DoubleCharges)
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
	for _, r := range append([]Result{rep.E2E, rep.Floor, rep.FloorEnd, rep.Naive, rep.Plain, *rep.HalfRate}, rep.Sweep...) {
		if r.Throughput <= 0 || r.Latency.N == 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
			t.Errorf("%s: implausible result %+v", r.Name, r)
		}
	}
	if rep.Burst.Suppressed < rep.Burst.Copies || rep.Burst.Rate <= 0 {
		t.Errorf("duplicate burst: %+v", rep.Burst)
	}
	if rep.E2E.CPU.Worker <= 0 || rep.WorkerPeakRSSMB <= 0 {
		t.Errorf("worker resources not measured: CPU %.2fs, peak RSS %.1f MB", rep.E2E.CPU.Worker, rep.WorkerPeakRSSMB)
	}
	if len(rep.Targets) != 6 {
		t.Errorf("%d targets evaluated, want 6", len(rep.Targets))
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
	for _, want := range []string{"## Results", "Temporal floor", "naive layout", "plain consumer", "## Ratios and the issue's targets", "double charges"} {
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
