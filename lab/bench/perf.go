package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU instructions per message, where the machine lets perf count them.
// Instructions retired do not grow when other tenants slow the CPUs down,
// as seconds do; on a machine without hardware counters (a VM without a
// virtual PMU) perf answers `<not supported>` and the report relies on
// /proc CPU time alone, saying so.

// instructionEvents are the perf events tried, in order: every
// instruction, then user space only (what perf_event_paranoid 2 still
// allows a user without CAP_PERFMON).
var instructionEvents = []string{"instructions", "instructions:u"}

// probePerf finds the first of events that `perf stat` counts on this
// machine. It returns "" and why when none is.
func probePerf(ctx context.Context, events ...string) (event, why string) {
	path, err := exec.LookPath("perf")
	if err != nil {
		return "", "perf is not installed (Debian package linux-perf)"
	}
	var whys []string
	for _, ev := range events {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(ctx, path, "stat", "-x,", "-e", ev, "--", "true").CombinedOutput()
		cancel()
		v, status := parsePerf(out, ev)
		switch {
		case err == nil && status == "":
			if v > 0 {
				return ev, ""
			}
			whys = append(whys, fmt.Sprintf("%s counted 0", ev))
		case status != "":
			whys = append(whys, fmt.Sprintf("%s %s", ev, status))
		default:
			whys = append(whys, fmt.Sprintf("%s: %v: %s", ev, err, strings.TrimSpace(string(out))))
		}
	}
	return "", "perf stat: " + strings.Join(whys, ", ")
}

// parsePerf reads the count of event from `perf stat -x,` output. status
// is perf's own word when it did not count ("<not supported>", "<not
// counted>"), or "not in the output".
func parsePerf(out []byte, event string) (v float64, status string) {
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 || f[2] != event {
			continue
		}
		if strings.HasPrefix(f[0], "<") {
			return 0, f[0]
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Sprintf("unreadable count %q", f[0])
		}
		return n, ""
	}
	return 0, "not in the output"
}

// perfRun is one `perf stat -p` per group of processes, counting event
// from start until stop.
type perfRun struct {
	event string
	cmds  map[string]*exec.Cmd
	outs  map[string]*bytes.Buffer
}

// startPerf counts event for each named group of PIDs (groups with no PID
// are left out).
func startPerf(event string, groups map[string][]int) (*perfRun, error) {
	r := &perfRun{event: event, cmds: map[string]*exec.Cmd{}, outs: map[string]*bytes.Buffer{}}
	for name, pids := range groups {
		var ps []string
		for _, p := range pids {
			if p > 0 {
				ps = append(ps, strconv.Itoa(p))
			}
		}
		if len(ps) == 0 {
			continue
		}
		// Stopped by SIGINT in stop, not by a context's kill: perf prints
		// its counts when interrupted.
		cmd := exec.Command("perf", "stat", "-x,", "-e", event, "-p", strings.Join(ps, ",")) //nolint:noctx // stopped by SIGINT in stop
		out := &bytes.Buffer{}
		cmd.Stderr = out
		if err := cmd.Start(); err != nil {
			_, _ = r.stop()
			return nil, fmt.Errorf("perf stat: %w", err)
		}
		r.cmds[name], r.outs[name] = cmd, out
	}
	return r, nil
}

// stop ends the counting and returns the count of each group. A nil run
// returns nil.
func (r *perfRun) stop() (map[string]float64, error) {
	if r == nil {
		return nil, nil
	}
	counts := map[string]float64{}
	var errs []error
	for name, cmd := range r.cmds {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// perf exits non-zero when interrupted: its output tells whether
		// it counted, and its exit status only explains a failure.
		var waitErr error
		select {
		case waitErr = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			waitErr = <-done
			errs = append(errs, fmt.Errorf("perf stat for %s did not stop: %w", name, waitErr))
			continue
		}
		v, status := parsePerf(r.outs[name].Bytes(), r.event)
		if status == "<not counted>" { // the processes never ran meanwhile
			v, status = 0, ""
		}
		if status != "" {
			errs = append(errs, fmt.Errorf("perf stat for %s: %s (%w): %s", name, status, waitErr, strings.TrimSpace(r.outs[name].String())))
			continue
		}
		counts[name] = v
	}
	return counts, errors.Join(errs...)
}

// startInstructions starts counting the instructions of the worker
// processes, the dev server and the harness, or returns nil when this
// machine cannot count them.
func (s *stack) startInstructions(cfg Config) *perfRun {
	if s.perfEvent == "" {
		return nil
	}
	r, err := startPerf(s.perfEvent, map[string][]int{"worker": s.workerPIDs(), "server": {s.devServerPID}, "harness": {os.Getpid()}})
	if err != nil {
		cfg.Logf("bench: instructions not counted: %v", err)
	}
	return r
}

// stopInstructions returns what r counted, by process group.
func (s *stack) stopInstructions(cfg Config, r *perfRun) map[string]float64 {
	counts, err := r.stop()
	if err != nil {
		cfg.Logf("bench: instructions: %v", err)
	}
	return counts
}
