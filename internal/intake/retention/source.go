package retention

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoHorizon reports a source whose copies can arrive for ever: no
// retention is safe for it, so the worker refuses to start with it.
var ErrNoHorizon = errors.New("the source has no redelivery horizon")

// SourceHorizon is how long after a message's first delivery one source
// can still hand over a copy of it. Each source reads its own from the
// broker (intake.Source.Horizon).
type SourceHorizon struct {
	// Source names the source (intake.Source.Name).
	Source string
	// Redelivery is the longest time from a message's first delivery to the
	// end of its last possible redelivery (a lost ack, a crash).
	Redelivery time.Duration
	// DuplicateWindow is the broker's publish deduplication window, 0 where
	// it has none: a re-publish inside it is dropped by the broker, after it
	// only the inbox recognises the copy.
	DuplicateWindow time.Duration
	// Basis says what the numbers were read from, for the start-up log and
	// the refusal ("consumer X: 5 deliveries, ack waits …", "topic T:
	// retention.ms + segment.ms").
	Basis string
}

// Total is the source's term of the horizon.
func (s SourceHorizon) Total() time.Duration { return s.Redelivery + s.DuplicateWindow }

// Validate refuses negative terms.
func (s SourceHorizon) Validate() error {
	if s.Redelivery < 0 || s.DuplicateWindow < 0 {
		return fmt.Errorf("source %s: horizon terms must not be negative (redelivery %s, duplicate window %s)", s.Source, s.Redelivery, s.DuplicateWindow)
	}
	return nil
}

// Longest returns the source whose copies can arrive latest; ok is false
// for no sources.
func Longest(sources []SourceHorizon) (longest SourceHorizon, ok bool) {
	for i, s := range sources {
		if i == 0 || s.Total() > longest.Total() {
			longest, ok = s, true
		}
	}
	return longest, ok
}

// JetStreamHorizon is the horizon of a JetStream consumer redelivering as r,
// on a stream with the given publish duplicate window. An unbounded consumer
// has none (ErrUnbounded, which wraps ErrNoHorizon).
func JetStreamHorizon(source string, r Redelivery, duplicateWindow time.Duration) (SourceHorizon, error) {
	w, err := r.Window()
	if err != nil {
		return SourceHorizon{}, fmt.Errorf("source %s: redelivery window: %w", source, err)
	}
	return SourceHorizon{
		Source: source, Redelivery: w, DuplicateWindow: duplicateWindow,
		Basis: fmt.Sprintf("%d deliveries, ack wait %s, backoff %v; stream duplicate window %s", r.MaxDeliver, r.AckWait, r.BackOff, duplicateWindow),
	}, nil
}
