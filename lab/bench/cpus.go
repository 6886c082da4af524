package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The run's CPU layouts (Config.TemporalCPUs).
const (
	// CPUsOwn gives the dev server CPUs of its own: the shape of a
	// deployment, where Temporal runs on machines the workers, Postgres and
	// the broker do not use.
	CPUsOwn = "own"
	// CPUsShared lets every process run on every CPU.
	CPUsShared = "shared"
)

// servicesComms are the command names of the services the run shares with
// the machine, moved off Temporal's CPUs with the harness: Postgres (a
// process per connection, each forked with the postmaster's CPUs), NATS and
// RabbitMQ's Erlang VM.
var servicesComms = []string{"postgres", "nats-server", "beam.smp"}

// cpuLayout is the run's placement of its processes on CPUs. With CPUsOwn,
// the dev server gets the first half of the CPUs the harness may use and
// every other process of the run the rest; undo gives every process it moved
// the harness's CPUs back.
type cpuLayout struct {
	all, temporal, rest unix.CPUSet
	// Moved names what was moved, for the report ("postgres ×12").
	Moved []string
	// Failed names what could not be moved, with the reason.
	Failed []string
	active bool
}

// newCPULayout reads the CPUs this process may use and splits them.
func newCPULayout() (*cpuLayout, error) {
	var l cpuLayout
	if err := unix.SchedGetaffinity(0, &l.all); err != nil {
		return nil, fmt.Errorf("read this process's CPUs: %w", err)
	}
	cpus := cpuList(l.all)
	if len(cpus) < 2 {
		return nil, fmt.Errorf("a CPU of Temporal's own needs at least 2 CPUs, this process may use %d (run with -temporal-cpus shared)", len(cpus))
	}
	half := len(cpus) / 2
	for i, c := range cpus {
		if i < half {
			l.temporal.Set(c)
		} else {
			l.rest.Set(c)
		}
	}
	return &l, nil
}

// cpuList lists the CPUs in s, in order.
func cpuList(s unix.CPUSet) []int {
	var out []int
	for c := range len(s) * 64 {
		if s.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// describe is the report's line about the layout.
func (l *cpuLayout) describe() string {
	if l == nil {
		return "every process on every CPU"
	}
	s := fmt.Sprintf("the dev server on CPU %s, everything else (the harness, the workers, %s) on CPU %s",
		listString(cpuList(l.temporal)), strings.Join(l.Moved, ", "), listString(cpuList(l.rest)))
	if len(l.Failed) > 0 {
		s += "; not moved: " + strings.Join(l.Failed, "; ")
	}
	return s
}

func listString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// apply moves this process (the harness; the workers it starts inherit its
// CPUs) and the services to the rest, and the dev server's process to
// Temporal's CPUs.
func (l *cpuLayout) apply(devServerPID int) error {
	if devServerPID <= 0 {
		return errors.New("the dev server's process was not found")
	}
	if err := setProcessCPUs(devServerPID, l.temporal); err != nil {
		return fmt.Errorf("move the dev server (pid %d): %w", devServerPID, err)
	}
	if err := setProcessCPUs(os.Getpid(), l.rest); err != nil {
		return fmt.Errorf("move the harness: %w", err)
	}
	l.active = true
	l.Moved, l.Failed = l.moveServices(l.rest)
	return nil
}

// undo gives the services and this process every CPU the harness had.
func (l *cpuLayout) undo() {
	if l == nil || !l.active {
		return
	}
	l.moveServices(l.all)
	_ = setProcessCPUs(os.Getpid(), l.all)
	l.active = false
}

// moveServices moves every process of servicesComms to set, and says how
// many of each it moved and which it could not.
func (l *cpuLayout) moveServices(set unix.CPUSet) (moved, failed []string) {
	count := map[string]int{}
	fails := map[string]error{}
	eachProcess(func(pid int, comm string, _ int) {
		if !slices.Contains(servicesComms, comm) {
			return
		}
		if err := setProcessCPUs(pid, set); err != nil {
			fails[comm] = err
			return
		}
		count[comm]++
	})
	for _, c := range servicesComms {
		if n := count[c]; n > 0 {
			moved = append(moved, fmt.Sprintf("%s ×%d", c, n))
		}
		if err := fails[c]; err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", c, err))
		}
	}
	return moved, failed
}

// setProcessCPUs sets the CPUs of every thread of pid. A thread started
// while it runs inherits the CPUs of the thread that started it, so a second
// pass catches one started from a thread the first pass had not reached.
func setProcessCPUs(pid int, set unix.CPUSet) error {
	if runtime.GOOS != "linux" {
		return errors.New("CPU placement is Linux only")
	}
	for range 2 {
		tids, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
		if err != nil || len(tids) == 0 {
			return fmt.Errorf("list the threads of pid %d: process gone", pid)
		}
		for _, d := range tids {
			tid, _ := strconv.Atoi(filepath.Base(d))
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
		}
	}
	return nil
}
