// Package retention computes how long effectively must remember a message
// before its records may be pruned, and refuses a retention shorter than that.
//
// A processed-message row or an inbox row is the proof that a message was
// handled. Pruning it while a copy of the message can still arrive would let
// the copy run again. A copy can arrive for as long as:
//
//   - the broker redelivers a message whose ack was lost: the consumer's
//     redelivery window, the sum of the ack wait of every delivery up to
//     MaxDeliver (see Redelivery.Window);
//   - a publisher's retry is still deduplicated by the broker: the stream's
//     duplicate window; a retry after it is a new stream message, which only
//     the inbox recognises;
//   - Temporal remembers the workflow ID of a closed run (the namespace's
//     retention), the second line of defence after the inbox.
//
// The horizon is their sum plus a margin for clock skew and slow pruning
// runs. The arithmetic here is pure; schedule.go reads the namespace
// retention from Temporal and keeps the Schedule that runs the retention.
package retention

import (
	"errors"
	"fmt"
	"time"

	"github.com/effectively/effectively/activities"
)

// DefaultMargin is added to every horizon: it absorbs clock skew between the
// worker, Postgres and the broker, and a schedule that ran late.
const DefaultMargin = time.Hour

// ErrUnbounded reports a consumer that redelivers without limit: no
// retention is safe for it.
var ErrUnbounded = fmt.Errorf("%w: the consumer redelivers without limit (MaxDeliver unset), so no retention is safe", ErrNoHorizon)

// Redelivery describes how a broker consumer redelivers a message whose ack
// did not arrive. It mirrors the JetStream consumer configuration.
type Redelivery struct {
	// AckWait is how long the broker waits for an ack before redelivering,
	// used for every delivery when BackOff is empty.
	AckWait time.Duration
	// MaxDeliver is the number of deliveries after which the broker stops;
	// 0 or less means unlimited.
	MaxDeliver int
	// BackOff, when set, replaces AckWait: delivery n waits BackOff[n-1],
	// the last entry repeating.
	BackOff []time.Duration
}

// Window is the longest time between a message's first delivery and the end
// of its last possible delivery's ack wait: a copy can arrive, and be
// processed, no later than that after the first copy was recorded.
func (r Redelivery) Window() (time.Duration, error) {
	if r.MaxDeliver <= 0 {
		return 0, ErrUnbounded
	}
	var total time.Duration
	for n := 1; n <= r.MaxDeliver; n++ {
		w := r.AckWait
		if len(r.BackOff) > 0 {
			w = r.BackOff[min(n-1, len(r.BackOff)-1)]
		}
		if w <= 0 {
			return 0, fmt.Errorf("delivery %d has ack wait %s; it must be positive", n, w)
		}
		total += w
	}
	return total, nil
}

// Inputs are what the horizon is computed from.
type Inputs struct {
	// Redelivery is the broker consumer's configuration; nil when messages
	// come from no broker (only `starter send`).
	Redelivery *Redelivery
	// DuplicateWindow is the stream's publish deduplication window.
	DuplicateWindow time.Duration
	// Sources are the horizons of the worker's sources; the longest one's
	// terms (redelivery plus duplicate window) count, when longer than
	// Redelivery's and DuplicateWindow's.
	Sources []SourceHorizon
	// NamespaceRetention is how long Temporal keeps a closed workflow run.
	NamespaceRetention time.Duration
	// Margin is added at the end. Zero means DefaultMargin; use a negative
	// value for none (tests).
	Margin time.Duration
}

// Horizon is the shortest safe retention and the terms it is the sum of.
type Horizon struct {
	// Source names the source whose terms count (the longest); empty
	// without sources.
	Source             string
	Redelivery         time.Duration
	DuplicateWindow    time.Duration
	NamespaceRetention time.Duration
	Margin             time.Duration
	// Total is the sum of the terms: rows younger than this are never pruned.
	Total time.Duration
}

// String explains the horizon term by term.
func (h Horizon) String() string {
	if h.Source != "" {
		return fmt.Sprintf("%s (source %s: redelivery window %s + duplicate window %s; + temporal namespace retention %s + margin %s)",
			h.Total, h.Source, h.Redelivery, h.DuplicateWindow, h.NamespaceRetention, h.Margin)
	}
	return fmt.Sprintf("%s (redelivery window %s + duplicate window %s + temporal namespace retention %s + margin %s)",
		h.Total, h.Redelivery, h.DuplicateWindow, h.NamespaceRetention, h.Margin)
}

// Compute returns the horizon of in.
func Compute(in Inputs) (Horizon, error) {
	h := Horizon{DuplicateWindow: in.DuplicateWindow, NamespaceRetention: in.NamespaceRetention, Margin: in.Margin}
	switch {
	case h.Margin == 0:
		h.Margin = DefaultMargin
	case h.Margin < 0:
		h.Margin = 0
	}
	if in.Redelivery != nil {
		w, err := in.Redelivery.Window()
		if err != nil {
			return Horizon{}, fmt.Errorf("redelivery window: %w", err)
		}
		h.Redelivery = w
	}
	for _, s := range in.Sources {
		if err := s.Validate(); err != nil {
			return Horizon{}, err
		}
	}
	if s, ok := Longest(in.Sources); ok && s.Total() > h.Redelivery+h.DuplicateWindow {
		h.Source, h.Redelivery, h.DuplicateWindow = s.Source, s.Redelivery, s.DuplicateWindow
	}
	if h.DuplicateWindow < 0 || h.NamespaceRetention < 0 {
		return Horizon{}, errors.New("durations must not be negative")
	}
	h.Total = h.Redelivery + h.DuplicateWindow + h.NamespaceRetention + h.Margin
	return h, nil
}

// Policy is a configured retention together with the horizon it was
// checked against.
type Policy struct {
	// Keep is how long records are kept (RETENTION).
	Keep time.Duration
	// Quarantine is how long a quarantine row is kept after the last copy
	// of its message arrived (QUARANTINE_RETENTION); 0 keeps quarantine
	// rows for good.
	Quarantine time.Duration
	// Horizon is the shortest safe retention.
	Horizon Horizon
}

// Prune returns the windows the Prune activity deletes by.
func (p Policy) Prune() activities.PrunePolicy {
	return activities.PrunePolicy{Keep: p.Keep, Quarantine: p.Quarantine, Horizon: p.Horizon.Total}
}

// Check refuses a retention (or a set quarantine retention) shorter than
// the horizon, naming both.
func (p Policy) Check() error {
	if p.Keep <= 0 {
		return fmt.Errorf("retention %s must be positive", p.Keep)
	}
	if p.Keep < p.Horizon.Total {
		return fmt.Errorf("retention %s is shorter than the safe horizon %s: a redelivered copy could arrive after its record was pruned and run again",
			p.Keep, p.Horizon)
	}
	return p.CheckQuarantine()
}

// CheckQuarantine refuses a quarantine retention shorter than the horizon,
// naming both: a copy of a quarantined message can arrive as long as a
// copy of any message can, and it must find the row that recognises it (and
// counts it) rather than open a new one with its history of copies and
// retries forgotten. 0 (never pruned) passes.
func (p Policy) CheckQuarantine() error {
	switch {
	case p.Quarantine < 0:
		return fmt.Errorf("quarantine retention %s must not be negative", p.Quarantine)
	case p.Quarantine > 0 && p.Quarantine < p.Horizon.Total:
		return fmt.Errorf("quarantine retention %s is shorter than the safe horizon %s: a redelivered copy of a quarantined message could arrive after its row was pruned and be quarantined again as a new entry",
			p.Quarantine, p.Horizon)
	}
	return nil
}
