//go:build failpoints

package failpoint

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

var (
	armed   atomic.Bool
	mu      sync.Mutex
	enabled map[string]bool
)

func init() {
	Arm(os.Getenv(EnvVar))
}

// Arm enables the comma-separated failpoints in list (replacing any armed
// before). An empty list disarms all.
func Arm(list string) {
	mu.Lock()
	defer mu.Unlock()
	enabled = map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			enabled[name] = true
		}
	}
	armed.Store(len(enabled) > 0)
}

// Hit kills the process if name is armed.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	on := enabled[name]
	mu.Unlock()
	if on {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Armed reports whether name is armed.
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	return enabled[name]
}
