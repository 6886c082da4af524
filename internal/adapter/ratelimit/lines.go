package ratelimit

import (
	"sync"
	"time"
)

// Lines keeps, for each flow (a route's consumer), when its latest request
// at the shared limits goes, or would have gone when it was sent back: the
// end of the flow's line, as this process's requests saw it. Every worker's
// requests wait in the same buckets in Postgres, so each process reads the
// whole line from its own requests' reservations, at no extra round trip.
// The intake holds a route's new workflow starts while the line runs
// further ahead than it needs (intake.Config.Lines): a backlog then waits
// in the inbox, not in Temporal, where its tasks would slow every route.
// Safe for concurrent use; the zero value is not: use NewLines.
type Lines struct {
	mu  sync.Mutex
	end map[string]time.Time
	now func() time.Time
}

// NewLines returns an empty Lines.
func NewLines() *Lines { return &Lines{end: map[string]time.Time{}, now: time.Now} }

// saw records that a request of flow goes (or would go) at at. A line's
// end only moves later while requests join it, so the latest end seen is
// kept.
func (l *Lines) saw(flow string, at time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.After(l.end[flow]) {
		l.end[flow] = at
	}
}

// Ahead is how far past now flow's line runs: 0 when its last request seen
// has gone.
func (l *Lines) Ahead(flow string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.end[flow].Sub(l.now()), 0)
}
