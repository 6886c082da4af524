package soak

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/effectively/effectively/internal/leaf/periodic"
)

// SeparateInfra gives the Temporal server, Postgres and NATS on this host
// the CPUs in infra, and this process and every process it started (the
// workers, the simulators, the probes) the others: the shape of a
// deployment, where those services run on machines of their own, as far
// as one host comes to it. Unlike PrioritizeInfra it gives neither side
// any of the other's CPUs, so both are measured with fewer. Every 250ms it
// sets the affinity of each thread of the processes named postgres,
// temporal, temporal-server or nats-server, and of this process's tree;
// stop gives them every CPU back. Setting another user's process needs
// root.
func SeparateInfra(infra []int) (stop func(), err error) {
	return separate(infra, separatedNames)
}

// separate is SeparateInfra for the services named names.
func separate(infra []int, names map[string]bool) (stop func(), err error) {
	all := runtime.NumCPU()
	var infraSet, restSet, allSet unix.CPUSet
	for c := range all {
		allSet.Set(c)
		restSet.Set(c)
	}
	for _, c := range infra {
		if c < 0 || c >= all {
			return nil, fmt.Errorf("CPU %d: this host has CPUs 0 to %d", c, all-1)
		}
		infraSet.Set(c)
		restSet.Clear(c)
	}
	if infraSet.Count() == 0 || restSet.Count() == 0 {
		return nil, fmt.Errorf("CPUs %v leave no CPU to one side of %d", infra, all)
	}
	apply := func(infra, rest *unix.CPUSet) error {
		tree := processTree(os.Getpid())
		return pinThreads(func(pid int, comm string) *unix.CPUSet {
			switch {
			case names[comm]:
				return infra
			case tree[pid]:
				return rest
			}
			return nil
		})
	}
	if err := apply(&infraSet, &restSet); err != nil {
		_ = apply(&allSet, &allSet)
		return nil, err
	}
	stopKeeping := periodic.Run(250*time.Millisecond, func() { _ = apply(&infraSet, &restSet) })
	return func() {
		stopKeeping()
		_ = apply(&allSet, &allSet)
	}, nil
}

// separatedNames are the services SeparateInfra moves to CPUs of their own:
// PrioritizeInfra's and the broker.
var separatedNames = map[string]bool{"postgres": true, "temporal": true, "temporal-server": true, "nats-server": true}

// pinThreads sets the affinity of every thread of each process to the set
// pick returns for it (nil: leave it). A thread or process that ends
// meanwhile is skipped; a refusal (no privilege) is returned.
func pinThreads(pick func(pid int, comm string) *unix.CPUSet) error {
	return eachThread(func(pid int, comm string) func(tid int) error {
		set := pick(pid, comm)
		if set == nil {
			return nil
		}
		return func(tid int) error {
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set the CPUs of thread %d of %s: %w", tid, comm, err)
			}
			return nil
		}
	})
}

// eachThread calls, for every process, pick with its PID and name
// (/proc/PID/comm), and the function it returns (nil: none) with each of
// the process's threads, stopping at the first error. A process that ends
// meanwhile is skipped.
func eachThread(pick func(pid int, comm string) func(tid int) error) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
		if err != nil {
			continue
		}
		fn := pick(pid, strings.TrimSpace(string(comm)))
		if fn == nil {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", p.Name(), "task"))
		if err != nil {
			continue
		}
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				if err := fn(tid); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// processTree is root and every process descended from it, read from
// /proc/PID/stat's parent field.
func processTree(root int) map[int]bool {
	parent := map[int]int{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue
		}
		// The name, field 2, is in parentheses and may hold spaces; the
		// parent is field 4, the second after it.
		i := strings.LastIndexByte(string(raw), ')')
		if i < 0 {
			continue
		}
		rest := strings.Fields(string(raw[i+1:]))
		if len(rest) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(rest[1]); err == nil {
			parent[pid] = pp
		}
	}
	tree := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if !tree[pid] && tree[pp] {
				tree[pid], changed = true, true
			}
		}
	}
	return tree
}
