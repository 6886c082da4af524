package intake

import (
	"context"
	"sync"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
)

// pace paces one route's workflow starts at a rate shared by every worker
// process (Config.StartRate). The workers reserve starts in chunks of a
// tenth of a second's worth through the providers' limiter
// (ratelimit.Limiter, provider "start", the route's consumer its
// endpoint: one bucket in Postgres per route, one token a chunk), so a
// start costs a statement only once per chunk; each chunk's starts go
// evenly from its slot. When Postgres does not answer, the limiter paces
// this process alone at the same rate (N workers may then start N times as
// fast, as they all did before the shared pace).
//
// At most one chunk goes at once: workers that come back to a backlog start
// it at the pace from their first starts. Starts faster than the providers'
// limit admits in total outran it before any started workflow reserved a
// slot for the hold (Config.Lines) to read, and the Temporal server's
// writes queued behind them, every route's with them (docs/operations.md).
type pace struct {
	limiter   *ratelimit.Limiter
	consumer  string
	chunk     int
	every     time.Duration // between two starts
	perSecond float64

	mu   sync.Mutex
	next time.Time // the next start's time
	left int       // starts left in the reserved chunk
}

// paceHorizon bounds one chunk's wait in the shared line: a reservation
// that would wait longer takes no slot and is asked again then.
const paceHorizon = 5 * time.Second

func newPace(backend ratelimit.Backend, consumer string, perSecond float64) (*pace, error) {
	chunk := max(1, int(perSecond/10))
	l, err := ratelimit.New(backend, ratelimit.Config{
		Provider:     "start",
		Endpoint:     ratelimit.Rate{PerSecond: perSecond / float64(chunk), Burst: 1},
		MaxWait:      paceHorizon,
		SendMargin:   time.Millisecond, // a start needs no time of its own after its slot
		ExpressShare: -1,
	})
	if err != nil {
		return nil, err
	}
	return &pace{limiter: l, consumer: consumer, chunk: chunk, every: time.Duration(float64(time.Second) / perSecond), perSecond: perSecond}, nil
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

// take reserves one start and returns its time, waiting for its chunk's
// slot when it takes a new chunk.
func (p *pace) take(ctx context.Context) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.left == 0 {
		err := p.limiter.Wait(ctx, p.consumer)
		if d, ok := ratelimit.Deferred(err); ok {
			// The shared line runs further ahead than the horizon (or
			// ctx's deadline): ask again when it is shorter.
			if err := sleep(ctx, d); err != nil {
				return time.Time{}, err
			}
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		p.left, p.next = p.chunk, time.Now()
	}
	at := p.next
	if now := time.Now(); at.Before(now) {
		at = now
	}
	if dl, ok := ctx.Deadline(); ok && at.After(dl) {
		return time.Time{}, context.DeadlineExceeded
	}
	p.left--
	p.next = at.Add(p.every)
	return at, nil
}

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
