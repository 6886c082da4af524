// Package ratelimit paces the requests of every worker process to a
// provider under the provider's rate limits, with token buckets kept in
// Postgres (GCRA: one row per bucket, one statement per request), and
// honours a 429 that still comes through by holding the buckets for its
// Retry-After.
//
// A request waits in the HTTP transport, inside the attempt that makes it:
// the wait is not a failure, uses no retry attempt of Temporal's, and the
// request's own timeout starts when it is sent (internal/leaf/deadline).
// A 429 is retried there too, after the pause, up to Config.MaxRetries
// times; Stripe and SendGrid refuse a 429 before acting on it (Stripe before
// its idempotency layer), so resending the same request is safe.
//
// Why Postgres: every worker already shares it, a reservation is one
// round trip (about 0.3 ms here) against a provider call of tens of ms,
// the limit holds for any number of workers without dividing it, and a
// 429's pause reaches them all at once. A Temporal task-queue limit would
// not cover the local activities of the fast path; a lease per worker
// divides the limit by a worker count that changes. When Postgres does not
// answer, the limiter falls back to a bucket in the process (the same
// rate, so N workers may together exceed it until Postgres is back; the
// provider's 429s, honoured, bound that).
package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/deadline"
)

// Rate is a limit in requests per second, with Burst requests at once.
type Rate struct {
	// PerSecond is the average rate; zero is no limit.
	PerSecond float64
	// Burst is how many requests may go at once; below 1, one.
	Burst int
}

// On reports whether r limits anything.
func (r Rate) On() bool { return r.PerSecond > 0 }

// Config configures a Limiter for one provider.
type Config struct {
	// Provider names the buckets ("stripe", "sendgrid"): every worker with
	// the same Provider shares them.
	Provider string
	// Global limits all of the provider's requests. Zero: none.
	Global Rate
	// Endpoint limits each endpoint: the method and the path, object IDs
	// as {id} (Stripe's create and confirm are two endpoints). Zero: none.
	Endpoint Rate
	// Endpoints overrides Endpoint for the endpoints named, e.g.
	// "GET /v1/payment_intents/search" (Stripe allows Search 20/s).
	Endpoints map[string]Rate
	// MaxRetries is how many 429s one request waits out before its caller
	// sees one. Zero means 3; negative, none.
	MaxRetries int
	// DefaultPause is how long a 429 without Retry-After holds the
	// buckets. Zero means 1s.
	DefaultPause time.Duration
	// MaxPause bounds what a Retry-After may ask. Zero means 60s.
	MaxPause time.Duration
	// MaxWait is the longest a request waits for its slot; one that would
	// wait longer (or past its context's deadline less SendMargin) takes no
	// slot and fails with a *DeferredError saying when to come back. Zero
	// means 20s.
	MaxWait time.Duration
	// SendMargin is the time a request needs after its wait, kept free
	// before its context's deadline. Zero means deadline.DefaultMargin.
	SendMargin time.Duration
	// ExpressShare is the share of each bucket's rate kept for the express
	// lane: when the line's wait is longer than one interval (slots
	// reserved ahead), a request of a flow with no slot to come there (no
	// backlog of its own) takes an express slot that comes sooner and is at
	// most an express interval away, rather than waiting behind another
	// flow's backlog. Each
	// express slot pushes the line back by one interval, so the bucket's
	// rate holds over time; while a backlog's slots are reserved ahead, up
	// to this share comes on top of them. Zero means 0.25; negative, no
	// express lane.
	ExpressShare float64
	// Observer counts waits, 429s and fallbacks; nil counts nothing.
	Observer Observer
	// Lines, when set, learns from each reservation where its flow's line
	// ends (one Lines may serve several providers' limiters).
	Lines *Lines
}

type flowKey struct{}

// WithFlow returns ctx whose requests belong to flow (a route's consumer):
// a flow without a backlog at a bucket takes its express lane, so one
// flow's backlog does not hold back another's requests
// (Config.ExpressShare).
func WithFlow(ctx context.Context, flow string) context.Context {
	return context.WithValue(ctx, flowKey{}, flow)
}

// flowOf is ctx's flow (WithFlow); "" for none, which is a flow too.
func flowOf(ctx context.Context) string {
	f, _ := ctx.Value(flowKey{}).(string)
	return f
}

type maxWaitKey struct{}

// WithMaxWait returns ctx whose requests wait at most d for their slot, when
// that is shorter than Config.MaxWait; one that would wait longer is sent
// back at once (*DeferredError). A local activity, which holds its
// workflow's task open while it waits, uses it so that in a backlog the
// regular activity waits instead.
func WithMaxWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, maxWaitKey{}, d)
}

// DeferredError is a request that was not sent: the shared limit has no
// slot for it within Config.MaxWait or its deadline. Try again after
// RetryAfter; nothing reached the provider and no slot was taken.
type DeferredError struct {
	Provider, Endpoint string
	RetryAfter         time.Duration
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("%s %s: not sent: the shared rate limit has a slot in %s", e.Provider, e.Endpoint, e.RetryAfter.Round(time.Millisecond))
}

// Deferred reports whether err is (or wraps) a *DeferredError, and when to
// try again.
func Deferred(err error) (time.Duration, bool) {
	if d, ok := errors.AsType[*DeferredError](err); ok {
		return d.RetryAfter, true
	}
	return 0, false
}

// Observer receives what the limiter does, for metrics.
type Observer interface {
	// RateWaited: a request to endpoint waited d for its slot.
	RateWaited(provider, endpoint string, d time.Duration)
	// RateLimited: the provider answered 429 (reason: its
	// Stripe-Rate-Limited-Reason, or "429"), and every worker pauses d.
	RateLimited(provider, endpoint, reason string, d time.Duration)
	// RateDeferred: a request to endpoint was not sent, its slot d away
	// being beyond what it could wait.
	RateDeferred(provider, endpoint string, d time.Duration)
	// RateFallback: Postgres did not answer; this process's own bucket
	// paced the request.
	RateFallback(provider string)
}

// Backend keeps the buckets: *store.Store.
type Backend interface {
	ReserveRate(ctx context.Context, r store.Reservation) (store.Reserved, error)
	PauseRate(ctx context.Context, names []string, d time.Duration) error
}

// Limiter paces one provider's requests. Safe for concurrent use.
type Limiter struct {
	cfg     Config
	backend Backend
	local   *local
}

// New returns a Limiter keeping its buckets in backend, or an error naming
// a bad field of cfg.
func New(backend Backend, cfg Config) (*Limiter, error) {
	if cfg.Provider == "" || strings.ContainsAny(cfg.Provider, " \x00") {
		return nil, fmt.Errorf("ratelimit: Provider %q must be a non-empty name without spaces", cfg.Provider)
	}
	if backend == nil {
		return nil, errors.New("ratelimit: no backend")
	}
	check := func(what string, r Rate) error {
		if r.PerSecond < 0 || r.Burst < 0 {
			return fmt.Errorf("ratelimit: %s %s rate %v/s burst %d: neither may be negative", cfg.Provider, what, r.PerSecond, r.Burst)
		}
		return nil
	}
	if err := errors.Join(check("global", cfg.Global), check("endpoint", cfg.Endpoint)); err != nil {
		return nil, err
	}
	for ep, r := range cfg.Endpoints {
		if err := check(ep, r); err != nil {
			return nil, err
		}
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 3
	}
	if cfg.DefaultPause <= 0 {
		cfg.DefaultPause = time.Second
	}
	if cfg.MaxPause <= 0 {
		cfg.MaxPause = time.Minute
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 20 * time.Second
	}
	if cfg.SendMargin <= 0 {
		cfg.SendMargin = deadline.DefaultMargin
	}
	switch {
	case cfg.ExpressShare == 0:
		cfg.ExpressShare = 0.25
	case cfg.ExpressShare < 0:
		cfg.ExpressShare = 0
	case cfg.ExpressShare > 1:
		return nil, fmt.Errorf("ratelimit: %s express share %v: at most 1", cfg.Provider, cfg.ExpressShare)
	}
	return &Limiter{cfg: cfg, backend: backend, local: &local{tat: map[string]time.Time{}}}, nil
}

// buckets are the buckets of a request to endpoint, in name order (the
// statement locks rows in this order: no deadlock between workers).
func (l *Limiter) buckets(endpoint string) []store.RateBucket {
	var bs []store.RateBucket
	if l.cfg.Global.On() {
		bs = append(bs, store.RateBucket{Name: l.cfg.Provider, Rate: l.cfg.Global.PerSecond, Burst: float64(l.cfg.Global.Burst)})
	}
	ep := l.cfg.Endpoint
	if r, ok := l.cfg.Endpoints[endpoint]; ok {
		ep = r
	}
	if ep.On() {
		bs = append(bs, store.RateBucket{Name: l.cfg.Provider + " " + endpoint, Rate: ep.PerSecond, Burst: float64(ep.Burst)})
	}
	slices.SortFunc(bs, func(a, b store.RateBucket) int { return strings.Compare(a.Name, b.Name) })
	return bs
}

// Wait takes a request's slot and waits for it. A request of a flow
// (WithFlow) with no slot to come at its buckets takes an express slot when
// one is near (Config.ExpressShare); the others wait in the buckets' line.
// It returns a *DeferredError, taking no slot, when the wait would be
// longer than Config.MaxWait or run into ctx's deadline; a
// *deadline.TooLateError (not sent) when less than Config.SendMargin is
// left before ctx's deadline, before the reservation or after the wait;
// and ctx's error (not sent) when ctx ends while it waits.
func (l *Limiter) Wait(ctx context.Context, endpoint string) error {
	bs := l.buckets(endpoint)
	if len(bs) == 0 {
		return nil
	}
	what := l.cfg.Provider + " " + endpoint
	// Too near its deadline to keep SendMargin after the send: no slot.
	if err := deadline.Check(ctx, what, l.cfg.SendMargin); err != nil {
		return err
	}
	maxWait := l.cfg.MaxWait
	if d, ok := ctx.Value(maxWaitKey{}).(time.Duration); ok {
		maxWait = min(maxWait, d)
	}
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(dl)-l.cfg.SendMargin)
	}
	res, err := l.backend.ReserveRate(ctx, store.Reservation{
		Buckets: bs, MaxWait: maxWait, Flow: flowOf(ctx), Share: l.cfg.ExpressShare, ExpressWait: min(l.expressWait(bs), maxWait),
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: not sent, waiting for the rate limit: %w", l.cfg.Provider, endpoint, context.Cause(ctx))
		}
		res.Wait, res.OK = l.local.reserve(bs, time.Now(), maxWait)
		if o := l.cfg.Observer; o != nil {
			o.RateFallback(l.cfg.Provider)
		}
	}
	d := res.Wait
	if flow := flowOf(ctx); flow != "" {
		l.cfg.Lines.saw(flow, time.Now().Add(d))
	}
	if !res.OK {
		if o := l.cfg.Observer; o != nil {
			o.RateDeferred(l.cfg.Provider, endpoint, d)
		}
		return &DeferredError{Provider: l.cfg.Provider, Endpoint: endpoint, RetryAfter: max(d-maxWait, 100*time.Millisecond)}
	}
	if d > 0 {
		if o := l.cfg.Observer; o != nil {
			o.RateWaited(l.cfg.Provider, endpoint, d)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s: not sent, waiting %s for the rate limit: %w", what, d, context.Cause(ctx))
		}
	}
	// The reservation's own round trip (a lock queue, the fallback after a
	// failed call) counts too: the slot goes unused rather than the request
	// going out with less than SendMargin left.
	return deadline.Check(ctx, what, l.cfg.SendMargin)
}

// expressWait is how far away an express slot may be: one express
// interval of the request's slowest bucket (and never beyond the
// request's own longest wait).
func (l *Limiter) expressWait(bs []store.RateBucket) time.Duration {
	if l.cfg.ExpressShare <= 0 {
		return 0
	}
	var slowest float64
	for _, b := range bs {
		slowest = max(slowest, 1/b.Rate)
	}
	return time.Duration(slowest / l.cfg.ExpressShare * float64(time.Second))
}

// Throttled holds the buckets a 429 names (Stripe-Rate-Limited-Reason
// global-* the global one, endpoint-* the endpoint's, otherwise both) for
// the answer's Retry-After, so every worker slows down; it returns the
// pause.
func (l *Limiter) Throttled(ctx context.Context, endpoint string, h http.Header) time.Duration {
	d, reason := l.pauseOf(h, time.Now())
	var names []string
	global, ep := l.cfg.Provider, l.cfg.Provider+" "+endpoint
	switch {
	case strings.HasPrefix(reason, "global"):
		names = []string{global}
	case strings.HasPrefix(reason, "endpoint"):
		names = []string{ep}
	default:
		names = []string{global, ep}
	}
	// The process's own buckets pause too: the fallback must honour it.
	l.local.pause(l.buckets(endpoint), names, time.Now().Add(d))
	if err := l.backend.PauseRate(ctx, names, d); err != nil && l.cfg.Observer != nil {
		l.cfg.Observer.RateFallback(l.cfg.Provider)
	}
	if o := l.cfg.Observer; o != nil {
		o.RateLimited(l.cfg.Provider, endpoint, reason, d)
	}
	return d
}

// pauseOf reads a 429's pause: Retry-After (seconds or an HTTP date), else
// SendGrid's X-RateLimit-Reset (a Unix time; DefaultPause when it has
// passed), else DefaultPause; at most MaxPause. reason is Stripe-Rate-Limited-Reason, or "429".
func (l *Limiter) pauseOf(h http.Header, now time.Time) (time.Duration, string) {
	reason := h.Get("Stripe-Rate-Limited-Reason")
	if reason == "" {
		reason = "429"
	}
	d := l.cfg.DefaultPause
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			// Bounded before the conversion, which overflows past 292 years.
			d = time.Duration(min(s, l.cfg.MaxPause.Seconds()) * float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	} else if v := h.Get("X-RateLimit-Reset"); v != "" {
		// Whole seconds, by the provider's clock: a reset that has come
		// by ours (that second begun, or the clocks apart) while the
		// provider still refused pauses DefaultPause, never nothing.
		if u, err := strconv.ParseInt(v, 10, 64); err == nil {
			if r := time.Unix(u, 0).Sub(now); r > 0 {
				d = r
			}
		}
	}
	return min(max(d, 0), l.cfg.MaxPause), reason
}

// Wrap returns the transport wrapper of cfg's limits kept in backend (a
// Limiter's Transport), nil when cfg limits nothing, or an error naming a
// bad field of cfg.
func Wrap(backend Backend, cfg Config) (func(http.RoundTripper) http.RoundTripper, error) {
	if !cfg.Global.On() && !cfg.Endpoint.On() && len(cfg.Endpoints) == 0 {
		return nil, nil
	}
	l, err := New(backend, cfg)
	if err != nil {
		return nil, err
	}
	return l.Transport, nil
}

// Transport returns base paced by l: each request waits for its slot, is
// sent through base, and a 429 pauses every worker and is sent again
// (Config.MaxRetries times), its body replayed.
func (l *Limiter) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{l: l, base: base}
}

type transport struct {
	l    *Limiter
	base http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	endpoint := Endpoint(r.Method, r.URL.Path)
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		body = b
	}
	ctx := r.Context()
	for try := 0; ; try++ {
		if err := t.l.Wait(ctx, endpoint); err != nil {
			// A resend (an HTTP client's retry) whose first send went out
			// is not "not sent": that send may have acted.
			return nil, deadline.Refusal(r, err)
		}
		req := r.Clone(ctx)
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		resp, err := t.base.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			// Out, and perhaps acted on (a 429 is refused before acting).
			deadline.MarkSent(r)
			return resp, err
		}
		t.l.Throttled(ctx, endpoint, resp.Header)
		if t.l.cfg.MaxRetries < 0 || try >= t.l.cfg.MaxRetries {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
}

// Endpoint names a request's endpoint: the method and the path, every
// segment that is an object ID (a Stripe ID prefix, or a digit other than
// an API version's) replaced by {id}.
func Endpoint(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segs {
		if isID(s) {
			segs[i] = "{id}"
		}
	}
	return method + " /" + strings.Join(segs, "/")
}

func isID(s string) bool {
	if len(s) >= 2 && s[0] == 'v' && strings.Trim(s[1:], "0123456789") == "" {
		return false // an API version
	}
	if p, rest, ok := strings.Cut(s, "_"); ok && len(p) <= 5 && len(rest) >= 8 && strings.ContainsAny(rest, "0123456789") {
		return true // pi_…, re_…, ch_…
	}
	return strings.ContainsAny(s, "0123456789@")
}

// local is the fallback bucket of one process, used while Postgres does not
// answer: the same GCRA, in memory.
type local struct {
	mu  sync.Mutex
	tat map[string]time.Time
}

func (b *local) reserve(bs []store.RateBucket, now time.Time, maxWait time.Duration) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var wait time.Duration
	next := make([]time.Time, len(bs))
	for i, x := range bs {
		emission := time.Duration(float64(time.Second) / x.Rate)
		tat := b.tat[x.Name]
		if tat.Before(now) {
			tat = now
		}
		next[i] = tat.Add(emission)
		wait = max(wait, next[i].Sub(now)-time.Duration(max(x.Burst, 1))*emission)
	}
	if wait > maxWait {
		return wait, false
	}
	for i, x := range bs {
		b.tat[x.Name] = next[i]
	}
	return wait, true
}

// pause holds the buckets of bs that names names until until: as
// PauseRate does, their theoretical arrival time goes burst-1 emissions past
// it, since reserve lets a request go that far ahead of it.
func (b *local) pause(bs []store.RateBucket, names []string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range bs {
		if !slices.Contains(names, x.Name) {
			continue
		}
		emission := time.Duration(float64(time.Second) / x.Rate)
		if tat := until.Add(time.Duration(max(x.Burst, 1)-1) * emission); b.tat[x.Name].Before(tat) {
			b.tat[x.Name] = tat
		}
	}
}
