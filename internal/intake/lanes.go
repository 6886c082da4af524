package intake

import "sync"

// lanes is the fast path's queue of starts, one lane per consumer, served
// in turn: a route with a backlog (thousands of messages after an outage)
// does not hold back another route's starts behind it. Each lane holds at
// most perLane; a start that finds its lane full is left to the
// Dispatcher.
type lanes struct {
	mu      sync.Mutex
	ready   *sync.Cond
	perLane int
	byKey   map[string][]fastStart
	turn    []string // the consumers with queued starts, in the order they are served
	closed  bool
}

func newLanes(perLane int) *lanes {
	l := &lanes{perLane: perLane, byKey: map[string][]fastStart{}}
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

// pop takes the next start, the lanes in turn, waiting for one; false once
// the lanes are closed and empty.
func (l *lanes) pop() (fastStart, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.turn) == 0 {
		if l.closed {
			return fastStart{}, false
		}
		l.ready.Wait()
	}
	k := l.turn[0]
	q := l.byKey[k]
	s := q[0]
	q[0] = fastStart{}
	l.turn = l.turn[1:]
	if q = q[1:]; len(q) > 0 {
		l.byKey[k] = q
		l.turn = append(l.turn, k) // its next start after the other lanes' next
	} else {
		delete(l.byKey, k)
	}
	return s, true
}

// close lets pop return what is queued, then false.
func (l *lanes) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.ready.Broadcast()
}
