// Package simlimit is the rate limiter of the provider simulators: token
// buckets keyed by name (an account, an endpoint, an API key) that answer
// whether one more request fits and, when not, how long until one does —
// what a provider's 429 and its Retry-After say.
package simlimit

import (
	"math"
	"sync"
	"time"
)

// Rate is a bucket's size: PerSecond requests a second on average, Burst
// at once. Zero PerSecond is no limit.
type Rate struct {
	PerSecond float64 `json:"per_second"`
	// Burst is how many requests may come at once; less than 1 means
	// max(1, PerSecond).
	Burst int `json:"burst"`
}

// On reports whether the rate limits anything.
func (r Rate) On() bool { return r.PerSecond > 0 }

func (r Rate) burst() float64 {
	if r.Burst >= 1 {
		return float64(r.Burst)
	}
	return max(1, math.Floor(r.PerSecond))
}

// Limiter holds token buckets by key. It is safe for concurrent use. The
// zero value is not usable: call New.
type Limiter struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a Limiter on the clock now (nil: time.Now).
func New(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, buckets: map[string]*bucket{}}
}

// Check is one request against the buckets of keys, each with its Rate
// (same length): either it fits in all of them, and one token is taken from
// each, or it is refused and nothing is taken. A refusal returns the index
// of the first full bucket and how long until it has a token again.
func (l *Limiter) Check(keys []string, rates []Rate) (ok bool, full int, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	bs := make([]*bucket, len(keys))
	for i, k := range keys {
		r := rates[i]
		if !r.On() {
			continue
		}
		b := l.buckets[k]
		if b == nil {
			b = &bucket{tokens: r.burst(), at: now}
			l.buckets[k] = b
		}
		if el := now.Sub(b.at).Seconds(); el > 0 {
			b.tokens = min(r.burst(), b.tokens+el*r.PerSecond)
			b.at = now
		}
		bs[i] = b
		if b.tokens < 1 {
			wait := time.Duration((1 - b.tokens) / r.PerSecond * float64(time.Second))
			return false, i, wait
		}
	}
	for _, b := range bs {
		if b != nil {
			b.tokens--
		}
	}
	return true, -1, 0
}

// Reset forgets every bucket.
func (l *Limiter) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.buckets)
}

// RetryAfterSeconds is d as Retry-After's whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
