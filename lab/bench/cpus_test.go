package bench

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// allowed reads the CPUs the kernel lets pid run on.
func allowed(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for pid %d", pid)
	return ""
}

func itoa(n int) string { return listString([]int{n}) }

func TestSetProcessCPUsMovesEveryThread(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	first := cpuList(mine)[0]
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	before := allowed(t, cmd.Process.Pid)

	var one unix.CPUSet
	one.Set(first)
	if err := setProcessCPUs(cmd.Process.Pid, one); err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, cmd.Process.Pid); got != itoa(first) {
		t.Fatalf("after the move the child may run on CPUs %q, want %q (before: %q)", got, itoa(first), before)
	}
	if err := setProcessCPUs(cmd.Process.Pid, mine); err != nil {
		t.Fatal(err)
	}
	if got := allowed(t, cmd.Process.Pid); got != before {
		t.Fatalf("moved back, the child may run on CPUs %q, want %q", got, before)
	}
	if err := setProcessCPUs(1<<22, one); err == nil {
		t.Fatal("a process that does not exist was moved")
	}
}

func TestCPULayoutSplitsTheCPUs(t *testing.T) {
	l, err := newCPULayout()
	n := len(cpuList(func() unix.CPUSet { var s unix.CPUSet; _ = unix.SchedGetaffinity(0, &s); return s }()))
	if n < 2 {
		if err == nil {
			t.Fatalf("%d CPU: a layout was made with no CPU left for the rest", n)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	tc, rc := cpuList(l.temporal), cpuList(l.rest)
	if len(tc) != n/2 || len(rc) != n-n/2 {
		t.Fatalf("%d CPUs split %v / %v", n, tc, rc)
	}
	for _, c := range tc {
		if l.rest.IsSet(c) {
			t.Fatalf("CPU %d is both Temporal's and the rest's", c)
		}
	}
}
