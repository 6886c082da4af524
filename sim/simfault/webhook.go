package simfault

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// WebhookConfig configures how a simulator delivers its signed webhooks the
// way the providers do: at least once (Copies), in no guaranteed order
// (MaxDelay), and retried with backoff on a non-2xx answer or a transport
// error. Zero fields take the defaults noted.
type WebhookConfig struct {
	// URL receives every event (POST).
	URL string
	// Copies is how many times each event is delivered. Default 1; 2 or
	// more makes every event arrive as duplicates.
	Copies int
	// MaxDelay is the largest random delay before each delivery, copies
	// included. Deliveries run concurrently, so a delay reorders them.
	// Default 0 (no delay).
	MaxDelay time.Duration
	// RetryInitial is the first backoff after a failed delivery; it doubles
	// up to RetryMax. Defaults 100ms and 5s.
	RetryInitial, RetryMax time.Duration
	// MaxAttempts bounds the attempts of one delivery. Default 0: until the
	// sender stops (Stripe retries for three days).
	MaxAttempts int
	// QueueSize bounds the events waiting to be sent; an event that finds
	// the queue full is dropped and counted. Default 4096.
	QueueSize int
	// Concurrency bounds deliveries in flight. Default 8.
	Concurrency int
	// Client sends the requests. Default: a client with a 10s timeout.
	Client *http.Client
}

// WebhookStats counts what a WebhookSender did.
type WebhookStats struct {
	// Enqueued counts deliveries accepted into the queue (copies count).
	Enqueued int64 `json:"enqueued"`
	// Delivered counts deliveries answered 2xx.
	Delivered int64 `json:"delivered"`
	// Retries counts failed attempts that were retried.
	Retries int64 `json:"retries"`
	// Dropped counts deliveries lost to a full queue, to MaxAttempts or to
	// Stop.
	Dropped int64 `json:"dropped"`
}

// SignFunc returns the headers that sign body, computed at each attempt
// (a retry carries a fresh timestamp, as the providers' do).
type SignFunc func(body []byte, now time.Time) http.Header

type delivery struct {
	body []byte
	sign SignFunc
}

// WebhookSender delivers events in the background. Create it with
// StartWebhooks and stop it with Stop.
//
// A delivery waiting for its delay or its next retry holds no goroutine
// and no slot: only the requests in flight are bounded (Concurrency), so a
// receiver that is down for a while delays its own events, not everyone's.
type WebhookSender struct {
	cfg    WebhookConfig
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending int                      // deliveries not yet delivered or dropped
	timers  map[*time.Timer]struct{} // waiting deliveries
	stats   struct{ enqueued, delivered, retries, dropped atomic.Int64 }
}

// StartWebhooks starts a sender for cfg.
func StartWebhooks(cfg WebhookConfig) (*WebhookSender, error) {
	if cfg.URL == "" {
		return nil, errors.New("simfault: webhook URL is empty")
	}
	if cfg.Copies <= 0 {
		cfg.Copies = 1
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = 100 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 5 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 4096
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &WebhookSender{
		cfg: cfg, ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.Concurrency),
		timers: map[*time.Timer]struct{}{},
	}, nil
}

// Enqueue schedules Copies deliveries of body, signed by sign, each after
// its own random delay. It never blocks: the caller may hold a lock. A
// delivery that finds QueueSize deliveries pending is dropped. Safe on a
// nil sender (no-op).
func (s *WebhookSender) Enqueue(body []byte, sign SignFunc) {
	if s == nil {
		return
	}
	for range s.cfg.Copies {
		s.mu.Lock()
		if s.ctx.Err() != nil || s.pending >= s.cfg.QueueSize {
			s.mu.Unlock()
			s.stats.dropped.Add(1)
			continue
		}
		s.pending++
		s.wg.Add(1)
		s.stats.enqueued.Add(1)
		var delay time.Duration
		if s.cfg.MaxDelay > 0 {
			delay = rand.N(s.cfg.MaxDelay) //nolint:gosec // jitter, not a secret
		}
		s.scheduleLocked(delivery{body: body, sign: sign}, delay, 1, s.cfg.RetryInitial)
		s.mu.Unlock()
	}
}

// scheduleLocked runs attempt `attempt` of d after delay. s.mu is held.
func (s *WebhookSender) scheduleLocked(d delivery, delay time.Duration, attempt int, backoff time.Duration) {
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		s.mu.Lock()
		delete(s.timers, t)
		s.mu.Unlock()
		s.attempt(d, attempt, backoff)
	})
	s.timers[t] = struct{}{}
}

// attempt posts d once, in a slot, and schedules the retry on failure.
func (s *WebhookSender) attempt(d delivery, attempt int, backoff time.Duration) {
	select {
	case s.slots <- struct{}{}:
	case <-s.ctx.Done():
		s.finish(false)
		return
	}
	ok := s.post(d)
	<-s.slots
	if ok {
		s.finish(true)
		return
	}
	if s.cfg.MaxAttempts > 0 && attempt >= s.cfg.MaxAttempts {
		s.finish(false)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		s.pending--
		s.stats.dropped.Add(1)
		s.wg.Done()
		return
	}
	s.stats.retries.Add(1)
	s.scheduleLocked(d, backoff, attempt+1, min(2*backoff, s.cfg.RetryMax))
}

// finish ends one delivery.
func (s *WebhookSender) finish(delivered bool) {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
	if delivered {
		s.stats.delivered.Add(1)
	} else {
		s.stats.dropped.Add(1)
	}
	s.wg.Done()
}

// Stats returns the counters. Safe on a nil sender (zero).
func (s *WebhookSender) Stats() WebhookStats {
	if s == nil {
		return WebhookStats{}
	}
	return WebhookStats{
		Enqueued: s.stats.enqueued.Load(), Delivered: s.stats.delivered.Load(),
		Retries: s.stats.retries.Load(), Dropped: s.stats.dropped.Load(),
	}
}

// Pending is how many deliveries are enqueued and not yet delivered or
// dropped.
func (s *WebhookSender) Pending() int64 {
	st := s.Stats()
	return st.Enqueued - st.Delivered - st.Dropped
}

// Stop stops delivering, abandons what waits for its delay or its retry
// (counted as dropped) and waits for the requests in flight to end.
// Idempotent; safe on a nil sender.
func (s *WebhookSender) Stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.mu.Lock()
	for t := range s.timers {
		if t.Stop() {
			s.pending--
			s.stats.dropped.Add(1)
			s.wg.Done()
		}
		delete(s.timers, t)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *WebhookSender) post(d delivery) bool {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(d.body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range d.sign(d.body, time.Now()) {
		req.Header[k] = v
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}
