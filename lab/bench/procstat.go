package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	tlog "go.temporal.io/sdk/log"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports as seen from user space.
const clockTicks = 100

// quietLogger drops the SDK's log lines: a benchmark prints its own.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// cpuSeconds is the user+system CPU time of pid so far (children that were
// not reaped excluded), or 0 when it cannot be read.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after the last ')' start at field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64) // field 14
	stime, _ := strconv.ParseFloat(f[12], 64) // field 15
	return (utime + stime) / clockTicks
}

// statusKB reads one "Name:   N kB" line of /proc/<pid>/status.
func statusKB(pid int, name string) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			fs := strings.Fields(rest)
			if len(fs) > 0 {
				n, _ := strconv.ParseInt(fs[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// peakRSSMB is VmHWM of pid: its peak resident set since it started.
func peakRSSMB(pid int) float64 { return float64(statusKB(pid, "VmHWM")) / 1024 }

// machineBusy returns the busy and total jiffies of all CPUs (/proc/stat).
func machineBusy() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// eachProcess calls fn with the PID, command name and parent PID of every
// process in /proc.
func eachProcess(fn func(pid int, comm string, ppid int)) {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		open, shut := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || shut < open {
			continue
		}
		f := strings.Fields(string(b[shut+1:]))
		if len(f) < 2 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:open])))
		ppid, _ := strconv.Atoi(f[1])
		fn(pid, string(b[open+1:shut]), ppid)
	}
}

// childPID finds a direct child of parent whose command name is comm, or 0.
func childPID(parent int, comm string) int {
	found := 0
	eachProcess(func(pid int, c string, ppid int) {
		if found == 0 && c == comm && ppid == parent {
			found = pid
		}
	})
	return found
}

// commCPU maps every process's PID to its CPU seconds, for the processes
// whose command name is one of comms, keyed by name: Postgres runs a process
// per connection, so its CPU is the sum over them.
func commCPU(comms ...string) map[string]map[int]float64 {
	out := make(map[string]map[int]float64, len(comms))
	for _, c := range comms {
		out[c] = map[int]float64{}
	}
	eachProcess(func(pid int, comm string, _ int) {
		if byPID, ok := out[comm]; ok {
			byPID[pid] = cpuSeconds(pid)
		}
	})
	return out
}

// grown sums what each process of after spent since before (a process
// that started meanwhile counts from 0; one that ended is lost).
func grown(before, after map[int]float64) float64 {
	var s float64
	for pid, t := range after {
		s += max(0, t-before[pid])
	}
	return s
}

// usage samples the CPU time of the processes of a run, so a phase can
// report what it cost each of them.
type usage struct {
	at                      time.Time
	worker, server, harness float64
	byComm                  map[string]map[int]float64
	busy, total             float64
}

// sampleUsage reads the CPU time of the worker processes (summed), the
// dev server, this harness, Postgres and NATS, and of the whole machine.
func sampleUsage(workerPIDs []int, serverPID int) usage {
	u := usage{at: time.Now(), server: cpuSeconds(serverPID), harness: cpuSeconds(os.Getpid())}
	for _, pid := range workerPIDs {
		u.worker += cpuSeconds(pid)
	}
	u.byComm = commCPU("postgres", "nats-server")
	u.busy, u.total = machineBusy()
	return u
}

// CPU is the CPU time spent during one phase, by process.
type CPU struct {
	// Worker is the worker processes' user+system seconds, summed.
	Worker float64 `json:"worker_s"`
	// Server is the Temporal dev server's (0 when it was not started here).
	Server float64 `json:"server_s"`
	// Harness is this process's: publisher, poller, simulators, and for the
	// reference points their in-process workers.
	Harness float64 `json:"harness_s"`
	// Postgres is the CPU of every postgres process (the server and its
	// per-connection backends), NATS the nats-server's.
	Postgres float64 `json:"postgres_s"`
	NATS     float64 `json:"nats_s"`
	// MachineBusy is the share of all CPUs busy during the phase (0–1):
	// whatever ran.
	MachineBusy float64 `json:"machine_busy"`
	// Other is the CPU seconds of everything else busy meanwhile: the
	// kernel's own work, and whatever else ran on the machine.
	Other float64 `json:"other_s"`
	// Instructions are the CPU instructions perf counted by process group
	// (worker, server, harness) for the e2e and floor runs; nil where perf
	// cannot count them (Report.CPUMeasure says why).
	Instructions map[string]float64 `json:"instructions,omitempty"`
}

func cpuBetween(a, b usage) CPU {
	c := CPU{Worker: b.worker - a.worker, Server: b.server - a.server, Harness: b.harness - a.harness,
		Postgres: grown(a.byComm["postgres"], b.byComm["postgres"]), NATS: grown(a.byComm["nats-server"], b.byComm["nats-server"])}
	if dt := b.total - a.total; dt > 0 {
		c.MachineBusy = (b.busy - a.busy) / dt
		all := (b.busy - a.busy) / clockTicks // jiffies of every CPU, summed
		c.Other = max(0, all-c.Worker-c.Server-c.Harness-c.Postgres-c.NATS)
	}
	return c
}

// Environment describes the machine and the components of a run.
type Environment struct {
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	CPUModel  string `json:"cpu_model"`
	CPUs      int    `json:"cpus"`
	MemoryMB  int64  `json:"memory_mb"`
	Postgres  string `json:"postgres"`
	// NATS is the broker of the run, server and version ("nats-server 2.10.x").
	NATS     string `json:"nats"`
	Temporal string `json:"temporal"`
	// BackgroundBusy is the share of all CPUs busy during the 2 s before the
	// run started anything: load that was not the benchmark's.
	BackgroundBusy float64 `json:"background_busy"`
	// CPULayout says where the run's processes ran (Config.TemporalCPUs).
	CPULayout string `json:"cpu_layout,omitempty"`
	// LoadAverage is /proc/loadavg's 1-minute figure at the start.
	LoadAverage string `json:"load_average"`
	// Commit is the checkout measured: git's short commit hash, with
	// "+dirty" when it had uncommitted changes.
	Commit string `json:"commit,omitempty"`
}

func hostEnvironment() Environment {
	e := Environment{GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				if fs := strings.Fields(rest); len(fs) > 0 {
					kb, _ := strconv.ParseInt(fs[0], 10, 64)
					e.MemoryMB = kb / 1024
				}
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			e.LoadAverage = f[0]
		}
	}
	return e
}

// backgroundBusy measures how busy the machine is over d before the run.
func backgroundBusy(d time.Duration) float64 {
	b0, t0 := machineBusy()
	time.Sleep(d)
	b1, t1 := machineBusy()
	if t1 <= t0 {
		return 0
	}
	return (b1 - b0) / (t1 - t0)
}

// gitCommit names the commit of the checkout at root, "+dirty" when it has
// uncommitted changes to tracked files, or "" outside a git checkout.
func gitCommit(ctx context.Context, root string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}
