package soak

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReniceReachesTheNamedProcesses: renice sets the nice of a process
// found by its name, and of no other. A process of the test's own, named
// apart, stands in for Postgres and the Temporal server (raising a nice
// needs no privilege).
func TestReniceReachesTheNamedProcesses(t *testing.T) {
	const name = "soak-nicetest"
	sleep, bin := sleepNamed(t, name)
	named, other := exec.Command(bin, "60"), exec.Command(sleep, "60")
	for _, c := range []*exec.Cmd{named, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	if err := renice(map[string]bool{name: true}, 7); err != nil {
		t.Fatal(err)
	}
	if n := niceOf(t, named.Process.Pid); n != 7 {
		t.Errorf("the named process runs at nice %d, want 7", n)
	}
	if n := niceOf(t, other.Process.Pid); n == 7 {
		t.Errorf("another process was reniced too")
	}
}

// niceOf reads a process's nice from /proc/PID/stat (its 19th field).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// The name, field 2, is in parentheses and may hold spaces.
	rest := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	n, err := strconv.Atoi(rest[16]) // field 19, the 17th after the name
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSeparateInfraPinsBothSides: SeparateInfra moves a service found by
// its name to the CPUs it is given and a process this one started to the
// others, and gives every CPU back when it stops. A process of the test's
// own, named apart, stands in for the services (so that no privilege is
// needed and the host's Postgres is left alone).
func TestSeparateInfraPinsBothSides(t *testing.T) {
	const name = "soak-cpustest"
	every := make([]int, runtime.NumCPU())
	for c := range every {
		every[c] = c
	}
	if _, err := separate(every, map[string]bool{name: true}); err == nil {
		t.Fatal("every CPU given to the services was accepted")
	}
	if len(every) < 2 {
		return // one CPU: nothing to separate, and SeparateInfra said so
	}
	sleep, bin := sleepNamed(t, name)
	// Both are this process's children: the name decides first.
	service, child := exec.Command(bin, "60"), exec.Command(sleep, "60")
	for _, c := range []*exec.Cmd{service, child} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	cpusOf := func(pid int) string {
		t.Helper()
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &set); err != nil {
			t.Fatal(err)
		}
		var cpus []string
		for c := range runtime.NumCPU() {
			if set.IsSet(c) {
				cpus = append(cpus, strconv.Itoa(c))
			}
		}
		return strings.Join(cpus, ",")
	}
	all := cpusOf(child.Process.Pid)
	stop, err := separate([]int{0}, map[string]bool{name: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := cpusOf(service.Process.Pid); got != "0" {
		t.Errorf("the service runs on CPUs %s, want 0", got)
	}
	if got := cpusOf(child.Process.Pid); strings.Contains(","+got+",", ",0,") || got == "" {
		t.Errorf("the run's own child runs on CPUs %s, want every CPU but 0", got)
	}
	stop()
	for _, pid := range []int{service.Process.Pid, child.Process.Pid} {
		if got := cpusOf(pid); got != all {
			t.Errorf("after stop, process %d runs on CPUs %s, want %s", pid, got, all)
		}
	}
}

// sleepNamed returns the path of sleep and of a copy of it named name, a
// process that stands apart from every other by its name.
func sleepNamed(t *testing.T, name string) (sleep, named string) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	named = filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(named, raw, 0o700); err != nil { //nolint:gosec // a path under t.TempDir()
		t.Fatal(err)
	}
	return sleep, named
}
