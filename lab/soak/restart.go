package soak

import (
	"fmt"
	"strings"
	"time"
)

// drainGrace is how long a worker sent SIGTERM gets before it is killed:
// the 30 s an orchestrator usually gives, above the worker's default drain
// timeout of 20 s.
const drainGrace = 30 * time.Second

// restartOne replaces worker i as a rolling deploy does: the new process
// starts first, then the old one gets SIGTERM and drains (its effects in
// flight finish their provider call and record). A worker that had to be
// killed after drainGrace, or exited with an error, is reported: a clean
// deploy must not depend on the kill.
func (w *workers) restartOne(i int) error {
	w.mu.Lock()
	at := i % len(w.procs)
	old := w.procs[at]
	w.procs = append(w.procs[:at], w.procs[at+1:]...)
	w.mu.Unlock()
	if err := w.add(); err != nil {
		old.Stop(drainGrace)
		return err
	}
	old.Stop(drainGrace)
	if old.Killed() {
		return fmt.Errorf("the old worker did not stop within %s of SIGTERM and was killed", drainGrace)
	}
	if err := old.Err(); err != nil {
		return fmt.Errorf("the old worker exited with %w; its last error lines:\n%s", err, lastErrors(old.Logs(), 5))
	}
	return nil
}

// lastErrors returns the last n log lines of a worker at level ERROR, for a
// violation to say why the worker failed.
func lastErrors(logs string, n int) string {
	var errs, raw []string
	for _, l := range strings.Split(logs, "\n") {
		switch {
		case strings.Contains(l, `"level":"ERROR"`):
			errs = append(errs, l)
		case l != "" && !strings.HasPrefix(l, "{") && len(raw) < 40:
			raw = append(raw, l) // not a log line: a panic, a fatal error
		}
	}
	out := strings.Join(errs[max(0, len(errs)-n):], "\n")
	if len(raw) > 0 {
		out += "\nand what it wrote outside its log:\n" + strings.Join(raw, "\n")
	}
	return out
}
