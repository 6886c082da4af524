// Package health serves the worker's probes: /livez answers as long as the
// process serves HTTP, /readyz runs named checks of what the worker depends
// on (Postgres reachable and migrated, Temporal reachable, NATS connected)
// and answers 503 naming each failing check.
//
// Liveness checks nothing outside the process on purpose: a restart does
// not cure an unreachable database, so an orchestrator that restarted the
// worker on a failed dependency would only add restarts to the outage.
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Check is one named readiness check. Fn returns nil when the dependency is
// usable; its error is shown in /readyz's answer.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
}

// DefaultTimeout bounds each check of a /readyz request.
const DefaultTimeout = 2 * time.Second

// Checker runs the readiness checks.
type Checker struct {
	checks  []Check
	timeout time.Duration
}

// New returns a Checker running checks, each bounded by timeout (default
// DefaultTimeout).
func New(timeout time.Duration, checks ...Check) *Checker {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Checker{checks: checks, timeout: timeout}
}

// Report is /readyz's JSON answer.
type Report struct {
	// Status is "ready" or "not ready".
	Status string `json:"status"`
	// Failed names the failing checks, sorted.
	Failed []string `json:"failed,omitempty"`
	// Checks maps each check to "ok" or its error.
	Checks map[string]string `json:"checks"`
}

// Run runs every check at once and reports them.
func (c *Checker) Run(ctx context.Context) Report {
	r := Report{Status: "ready", Checks: map[string]string{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, ch := range c.checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			err := ch.Fn(cctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Checks[ch.Name] = err.Error()
				r.Failed = append(r.Failed, ch.Name)
				return
			}
			r.Checks[ch.Name] = "ok"
		})
	}
	wg.Wait()
	if len(r.Failed) > 0 {
		sort.Strings(r.Failed)
		r.Status = "not ready"
	}
	return r
}

// Register adds GET /livez, /healthz (an alias of /livez, kept for
// deployments that probe the old path) and /readyz to mux.
func (c *Checker) Register(mux *http.ServeMux) {
	live := func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
	}
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := c.Run(r.Context())
		code := http.StatusOK
		if len(rep.Failed) > 0 {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rep)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
