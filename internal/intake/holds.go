package intake

import (
	"context"
	"sync"
	"time"
)

// holdSet is the last deliveries this process holds (Path.holdLast), and
// those it committed within holdMemory, by their raw bytes, so that a dead
// letter of one of them waits for the hold instead of recording the
// message a second time beside it. The broker gives up on a held last
// delivery when its keep-alives come late (a busy machine), and its dead
// letter then arrives while the hold still works, or just after.
type holdSet struct {
	mu sync.Mutex
	m  map[string][]*hold
}

// hold is one held last delivery. done closes when the hold ends; settled
// then says whether the message committed (recorded or quarantined).
type hold struct {
	done    chan struct{}
	settled bool
	result  Result
	until   time.Time // a committed hold is kept until then
}

// holdMemory is how long a hold that committed its message is kept after
// it ends: the broker may publish the dead letter just after the hold's
// settle, and that dead letter is a copy too.
const holdMemory = time.Minute

// add registers a hold of raw; its end reports the outcome.
func (s *holdSet) add(raw []byte) (end func(settled bool, res Result)) {
	h := &hold{done: make(chan struct{})}
	key := string(raw)
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string][]*hold{}
	}
	s.prune()
	s.m[key] = append(s.m[key], h)
	s.mu.Unlock()
	return func(settled bool, res Result) {
		s.mu.Lock()
		h.settled, h.result = settled, res
		h.until = time.Now().Add(holdMemory)
		if !settled {
			s.drop(key, h)
		}
		s.mu.Unlock()
		close(h.done)
	}
}

// drop removes h from key's holds; s.mu is held.
func (s *holdSet) drop(key string, h *hold) {
	hs := s.m[key]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(s.m, key)
	} else {
		s.m[key] = hs
	}
}

// prune forgets the committed holds older than holdMemory; s.mu is held.
func (s *holdSet) prune() {
	now := time.Now()
	for key, hs := range s.m {
		for _, h := range hs {
			if !h.until.IsZero() && now.After(h.until) {
				s.drop(key, h)
			}
		}
	}
}

// find returns a hold of raw, or nil: one under way or committed within
// holdMemory.
func (s *holdSet) find(raw []byte) *hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune()
	if hs := s.m[string(raw)]; len(hs) > 0 {
		return hs[0]
	}
	return nil
}

// awaitHold waits for h to end, keeping d (a dead letter) alive meanwhile,
// and reports whether the hold committed the message. false when ctx ends
// first.
func (p *Path) awaitHold(ctx context.Context, d Delivery, h *hold) bool {
	every := time.Second
	if d.AckWait > 0 {
		every = max(d.AckWait/3, 10*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return h.settled
		case <-ctx.Done():
			return false
		case <-tick.C:
			if d.KeepAlive != nil {
				d.KeepAlive()
			}
		}
	}
}
