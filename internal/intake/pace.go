package intake

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/effectively/effectively/internal/adapter/store"
)

// paceBackend keeps the pace's shared bucket: *store.Store.
type paceBackend interface {
	ReserveRate(ctx context.Context, r store.Reservation) (store.Reserved, error)
}

// pace paces one route's workflow starts at a rate shared by every worker
// process (Config.StartRate). The workers reserve starts in chunks of a
// tenth of a second's worth from one bucket in Postgres ("start
// <consumer>", the providers' limiter's table), so a start costs a
// statement only once per chunk; each chunk's starts go evenly from its
// slot. When Postgres does not answer, this process paces itself alone at
// the same rate (N workers may then start N times as fast, as they all did
// before the shared pace).
//
// At most one chunk goes at once: workers that come back to a backlog start
// it at the pace from their first starts. Starts faster than the providers' limit
// admits in total outran it before any started workflow reserved a slot for
// the hold (Config.Lines) to read, and the Temporal server's writes queued
// behind them, every route's with them (docs/operations.md).
type pace struct {
	backend paceBackend
	bucket  store.RateBucket // one token a chunk
	chunk   int
	every   time.Duration // between two starts
	local   *rate.Limiter // the fallback

	mu   sync.Mutex
	next time.Time // the next start's time
	left int       // starts left in the reserved chunk
}

// paceHorizon bounds one chunk's wait in the shared line: a reservation
// that would wait longer takes no slot and is asked again then.
const paceHorizon = 5 * time.Second

func newPace(backend paceBackend, consumer string, perSecond float64) *pace {
	chunk := max(1, int(perSecond/10))
	p := &pace{
		backend: backend,
		bucket:  store.RateBucket{Name: "start " + consumer, Rate: perSecond / float64(chunk), Burst: 1},
		chunk:   chunk,
		every:   time.Duration(float64(time.Second) / perSecond),
		local:   rate.NewLimiter(rate.Limit(perSecond), chunk),
	}
	p.local.AllowN(time.Now(), chunk) // empty
	return p
}

// wait waits for one start; an error, taking no start, when ctx ends
// first or would before the start's turn.
func (p *pace) wait(ctx context.Context) error {
	at, err := p.take(ctx)
	if err != nil {
		return err
	}
	return sleep(ctx, time.Until(at))
}

// take reserves one start and returns its time.
func (p *pace) take(ctx context.Context) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for p.left == 0 {
		res, err := p.backend.ReserveRate(ctx, store.Reservation{Buckets: []store.RateBucket{p.bucket}, MaxWait: paceHorizon})
		if err != nil {
			if ctx.Err() != nil {
				return time.Time{}, context.Cause(ctx)
			}
			r := p.local.Reserve()
			if dl, ok := ctx.Deadline(); ok && now.Add(r.Delay()).After(dl) {
				r.Cancel()
				return time.Time{}, context.DeadlineExceeded
			}
			return now.Add(r.Delay()), nil
		}
		if !res.OK {
			// The shared line runs further ahead than the horizon: wait
			// part of it and ask again.
			if err := sleep(ctx, min(res.Wait-paceHorizon, paceHorizon)); err != nil {
				return time.Time{}, err
			}
			now = time.Now()
			continue
		}
		p.left = p.chunk
		p.next = now.Add(res.Wait)
	}
	at := p.next
	if at.Before(now) {
		at = now
	}
	if dl, ok := ctx.Deadline(); ok && at.After(dl) {
		return time.Time{}, context.DeadlineExceeded
	}
	p.left--
	p.next = at.Add(p.every)
	return at, nil
}

// perSecond is the pace's rate.
func (p *pace) perSecond() float64 { return float64(p.local.Limit()) }

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
