package simfault

import (
	"encoding/json"
	"slices"
	"sync"
)

// Armed is a fault in a List and how many more times it may fire.
type Armed[M any] struct {
	// Fault is the fault as it was added.
	Fault Fault[M]
	// Remaining is how many more times the fault fires before it is
	// removed; 0 means until the faults are cleared.
	Remaining int
}

// MarshalJSON encodes a as its Fault with a remaining member, which is left
// out when the fault fires until the faults are cleared.
func (a Armed[M]) MarshalJSON() ([]byte, error) {
	w := a.Fault.wire()
	if a.Remaining > 0 {
		remaining := a.Remaining
		w.Remaining = &remaining
	}
	return json.Marshal(w)
}

// List is the faults a simulator has armed, in the order they were added,
// each with the number of times it may still fire. The zero value is an
// empty list. A List is safe for concurrent use, and its methods may be
// called while holding the simulator's own mutex; it must not be copied
// after first use.
type List[M any] struct {
	mu    sync.Mutex
	armed []Armed[M]
}

// Add arms f after the faults already armed. A Times of 0 (or less) arms it
// until the faults are cleared. Add does not validate f; a fault of an
// unknown kind never fires.
func (l *List[M]) Add(f Fault[M]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = append(l.armed, Armed[M]{Fault: f, Remaining: max(f.Times, 0)})
}

// Clear removes every fault.
func (l *List[M]) Clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = nil
}

// Armed returns a copy of the armed faults, in the order they were added.
// It is never nil, so that no faults encode as [] in JSON.
func (l *List[M]) Armed() []Armed[M] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(make([]Armed[M], 0, len(l.armed)), l.armed...)
}

// Take fires the first fault, in the order the faults were added, whose kind
// is one of kinds and whose Match is accepted by match, and returns it. The
// fault uses up one of its times and is removed when none is left. ok is
// false when no fault fires. match is called with the list locked, so it
// must not use the list.
func (l *List[M]) Take(match func(M) bool, kinds ...Kind) (f Fault[M], ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.armed {
		a := &l.armed[i]
		if !slices.Contains(kinds, a.Fault.Kind) || !match(a.Fault.Match) {
			continue
		}
		f = a.Fault
		if a.Remaining > 0 {
			a.Remaining--
			if a.Remaining == 0 {
				l.armed = slices.Delete(l.armed, i, i+1)
			}
		}
		return f, true
	}
	return Fault[M]{}, false
}

// TakeAll fires every fault whose kind is one of kinds and whose Match is
// accepted by match, and returns them in the order they were added. Each
// uses up one of its times; those with none left are removed. match is
// called with the list locked, so it must not use the list.
func (l *List[M]) TakeAll(match func(M) bool, kinds ...Kind) []Fault[M] {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fired []Fault[M]
	kept := l.armed[:0]
	for _, a := range l.armed {
		if slices.Contains(kinds, a.Fault.Kind) && match(a.Fault.Match) {
			fired = append(fired, a.Fault)
			if a.Remaining > 0 {
				a.Remaining--
				if a.Remaining == 0 {
					continue
				}
			}
		}
		kept = append(kept, a)
	}
	clear(l.armed[len(kept):])
	l.armed = kept
	return fired
}
