package effect

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/effectively/effectively/internal/leaf/periodic"
)

// ErrDraining is returned by Begin when the worker is shutting down and
// takes no new effect. The attempt claimed nothing: another worker (or this
// one, restarted) runs it from the start.
var ErrDraining = errors.New("the worker is shutting down; another attempt will run this effect")

// DefaultTimeout bounds an effect that runs outside any activity deadline
// (a test calling an activity method directly).
const DefaultTimeout = 2 * time.Minute

// HeartbeatEvery is how often a regular activity heartbeats while its
// effect runs: well inside the HeartbeatTimeout the workflows set, so that
// a live worker is never taken for a dead one.
const HeartbeatEvery = 2 * time.Second

// Drainer tracks the effects in flight in a worker process so that a
// shutdown can let each of them finish its provider call and its record.
//
// Why: on worker stop the Temporal SDK cancels in-flight local activities at
// once ("worker stopping"). An effect cancelled after Stripe charged or
// SendGrid accepted, but before Postgres recorded it, is repeated by the
// retry: a duplicate receipt, or a replayed charge. With a Drainer, an
// effect runs on a context that the activity's cancellation does not reach
// (its deadline still does), and the worker's shutdown first closes the
// Drainer (no new effect starts; such an attempt fails retryably before it
// claims anything), then waits for the ones in flight, and only then stops
// the Temporal worker and closes the Postgres pool.
//
// The zero value is ready to use. A nil *Drainer tracks nothing and never
// refuses: effects then run on the activity's own context.
type Drainer struct {
	mu       sync.Mutex
	closed   bool
	inFlight int
	idle     chan struct{} // closed when inFlight drops to 0 after Close
}

// begin registers one effect. It reports false when the Drainer is closed.
func (d *Drainer) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.inFlight++
	return true
}

func (d *Drainer) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight--
	if d.inFlight == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// Close stops new effects from starting: from now on Begin returns
// ErrDraining. Effects already in flight go on. Close is idempotent.
func (d *Drainer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
}

// InFlight is the number of effects running now.
func (d *Drainer) InFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight
}

// Wait closes the Drainer and waits until no effect is in flight, or until
// ctx ends; it then returns ctx's error and the number still running. Those
// go to the retry path: their attempt is retried once its timeout expires,
// and the ledger makes the retry replay, not repeat, a recorded effect.
func (d *Drainer) Wait(ctx context.Context) (remaining int, err error) {
	d.mu.Lock()
	d.closed = true
	if d.inFlight == 0 {
		d.mu.Unlock()
		return 0, nil
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return 0, nil
	case <-ctx.Done():
		return d.InFlight(), ctx.Err()
	}
}

// Begin starts one effect (claim, provider call, record) as a unit that a
// worker shutdown waits for rather than cancels: the returned context keeps
// the activity's values and deadline but not its cancellation, and a
// regular activity heartbeats until end is called. A nil d leaves ctx as it
// is (and still heartbeats). When d is draining, Begin returns ErrDraining.
func Begin(ctx context.Context, d *Drainer) (effectCtx context.Context, end func(), err error) {
	if d == nil {
		return ctx, heartbeat(ctx), nil
	}
	if !d.begin() {
		return nil, nil, ErrDraining
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultTimeout)
	}
	ectx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	stopBeat := heartbeat(ctx)
	return ectx, func() {
		stopBeat()
		cancel()
		d.end()
	}, nil
}

// heartbeat records a heartbeat for a regular activity every HeartbeatEvery
// until the returned function is called. Local activities do not heartbeat
// (the SDK ignores it); a context that is no activity's is left alone.
func heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).IsLocalActivity {
		return func() {}
	}
	activity.RecordHeartbeat(ctx)
	return periodic.Run(HeartbeatEvery, func() { activity.RecordHeartbeat(ctx) })
}
