package intake

import (
	"slices"
	"sync"
	"time"
)

// lanes is the fast path's queue of starts, one lane per consumer, served
// in turn: a route with a backlog (thousands of messages after an outage)
// does not hold back another route's starts behind it. Each lane holds at
// most perLane; a start that finds its lane full is left to the
// Dispatcher. A lane whose route is held (Intake.held), or whose route
// has perRoute starts with the starters already (waiting for its pace, or
// in flight), is passed over until the hold ends or a start is done,
// keeping its starts: the other routes' lanes keep starters.
type lanes struct {
	mu       sync.Mutex
	ready    *sync.Cond
	held     func(consumer string) bool
	perLane  int
	perRoute int            // 0: no bound
	busy     map[string]int // starts popped and not done, by consumer
	byKey    map[string][]fastStart
	turn     []string    // the consumers with queued starts, in the order they are served
	recheck  *time.Timer // set while every queued lane is held
	closed   bool
	// admitted counts, by consumer, the deliveries let in by tryAdmit and
	// not yet released; shrunk is closed (and dropped) when a lane shrinks,
	// an admission ends or the lanes close, waking the deliveries waiting
	// for room.
	admitted map[string]int
	shrunk   chan struct{}
}

// heldRecheck is how often a starter looks again at lanes that were all
// held.
const heldRecheck = 20 * time.Millisecond

// newLanes returns lanes of perLane starts each; held, when not nil, says
// which routes' lanes wait; perRoute, when above 0, bounds a route's
// starts between pop and done.
func newLanes(perLane, perRoute int, held func(consumer string) bool) *lanes {
	if held == nil {
		held = func(string) bool { return false }
	}
	l := &lanes{perLane: perLane, perRoute: perRoute, held: held, busy: map[string]int{}, byKey: map[string][]fastStart{}, admitted: map[string]int{}}
	l.ready = sync.NewCond(&l.mu)
	return l
}

// push queues s in its consumer's lane; false when the lane is full or the
// lanes are closed.
func (l *lanes) push(s fastStart) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := s.m.Consumer
	q := l.byKey[k]
	if l.closed || len(q) >= l.perLane {
		return false
	}
	if len(q) == 0 {
		l.turn = append(l.turn, k)
	}
	l.byKey[k] = append(q, s)
	l.ready.Signal()
	return true
}

// pop takes the next start of a lane not held, the lanes in turn, waiting
// for one; false once the lanes are closed and empty. Closed, it takes the
// held lanes' starts too, for the starters to leave pending.
func (l *lanes) pop() (fastStart, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := -1
	for {
		if len(l.turn) == 0 && l.closed {
			return fastStart{}, false
		}
		for j, k := range l.turn {
			if l.closed || (!l.held(k) && (l.perRoute <= 0 || l.busy[k] < l.perRoute)) {
				i = j
				break
			}
		}
		if i >= 0 {
			break
		}
		if len(l.turn) > 0 && l.recheck == nil { // every queued lane held or busy: look again soon
			l.recheck = time.AfterFunc(heldRecheck, func() {
				l.mu.Lock()
				l.recheck = nil
				l.mu.Unlock()
				l.ready.Broadcast()
			})
		}
		l.ready.Wait()
	}
	k := l.turn[i]
	q := l.byKey[k]
	s := q[0]
	q[0] = fastStart{}
	if i == 0 {
		l.turn = l.turn[1:]
	} else {
		l.turn = slices.Delete(l.turn, i, i+1)
	}
	if q = q[1:]; len(q) > 0 {
		l.byKey[k] = q
		l.turn = append(l.turn, k) // its next start after the other lanes' next
	} else {
		delete(l.byKey, k)
	}
	l.busy[k]++
	l.wake()
	return s, true
}

// tryAdmit lets one more delivery of consumer in when its lane and the
// deliveries already let in hold fewer than ahead, counting it until
// release; otherwise it returns a channel closed when that may change.
// Closed lanes let everything in.
func (l *lanes) tryAdmit(consumer string, ahead int) (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.byKey[consumer])+l.admitted[consumer] < ahead {
		l.admitted[consumer]++
		return true, nil
	}
	if l.shrunk == nil {
		l.shrunk = make(chan struct{})
	}
	return false, l.shrunk
}

// release ends an admission of tryAdmit.
func (l *lanes) release(consumer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.admitted[consumer]--; l.admitted[consumer] <= 0 {
		delete(l.admitted, consumer)
	}
	l.wake()
}

// wake wakes the deliveries waiting for room. Called with l.mu held.
func (l *lanes) wake() {
	if l.shrunk != nil {
		close(l.shrunk)
		l.shrunk = nil
	}
}

// done ends a start pop returned.
func (l *lanes) done(consumer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[consumer]--; l.busy[consumer] <= 0 {
		delete(l.busy, consumer)
	}
	l.ready.Signal()
}

// close lets pop return what is queued, then false.
func (l *lanes) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.ready.Broadcast()
	l.wake()
}
