package soak

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReniceReachesTheNamedProcesses: renice sets the nice of a process
// found by its name, and of no other. A process of the test's own, named
// apart, stands in for Postgres and the Temporal server (raising a nice
// needs no privilege).
func TestReniceReachesTheNamedProcesses(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	const name = "soak-nicetest"
	bin := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(bin, raw, 0o700); err != nil { //nolint:gosec // a path under t.TempDir()
		t.Fatal(err)
	}
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
