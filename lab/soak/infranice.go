package soak

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/effectively/effectively/internal/leaf/periodic"
)

// infraNames are the process names (/proc/PID/comm) PrioritizeInfra
// renices: Postgres's processes and the Temporal dev server or server.
var infraNames = map[string]bool{"postgres": true, "temporal": true, "temporal-server": true}

const autogroupPath = "/proc/sys/kernel/sched_autogroup_enabled"

// PrioritizeInfra gives the Temporal server and Postgres on this host CPU
// priority (nice, e.g. -10) over everything else, the workers, the
// simulators and the probes included, as if they ran on cores of their
// own: the deployment the fairness target is about, where a route's
// backlog competes with a quiet route in the workers and not for the
// cores of the services they share. It needs root, and turns the kernel's
// autogroup scheduling off while it runs (with it on, nice orders threads
// only within their session). Every 250ms it renices each thread of the
// processes named postgres, temporal or temporal-server; stop sets them
// back to 0 and restores autogroup.
func PrioritizeInfra(nice int) (stop func(), err error) {
	prev, err := os.ReadFile(autogroupPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", autogroupPath, err)
	}
	if err := os.WriteFile(autogroupPath, []byte("0"), 0o600); err != nil {
		return nil, fmt.Errorf("turn autogroup off (root needed): %w", err)
	}
	if err := renice(infraNames, nice); err != nil {
		_ = os.WriteFile(autogroupPath, prev, 0o600) //nolint:gosec // a fixed /proc path
		return nil, err
	}
	stopKeeping := periodic.Run(250*time.Millisecond, func() { _ = renice(infraNames, nice) })
	return func() {
		stopKeeping()
		_ = renice(infraNames, 0)
		_ = os.WriteFile(autogroupPath, prev, 0o600) //nolint:gosec // a fixed /proc path
	}, nil
}

// renice sets every thread of the processes whose name (/proc/PID/comm) is
// in names to nice. A thread that ends meanwhile is skipped; a refusal (no
// privilege) is returned.
func renice(names map[string]bool, nice int) error {
	return eachThread(func(_ int, comm string) func(tid int) error {
		if !names[comm] {
			return nil
		}
		return func(tid int) error {
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("renice thread %d of %s: %w", tid, comm, err)
			}
			return nil
		}
	})
}
