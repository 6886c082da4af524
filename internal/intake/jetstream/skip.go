package jetstream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// skipFresh is how old the shared consumer's view of the route durables may
// be when it decides to skip a message; skipRecheck, when the view says a
// subject's durable is not in use (a worker that just started may not
// have pulled yet). Variables for the tests.
var (
	skipFresh   = 2 * time.Second
	skipRecheck = 100 * time.Millisecond
)

// skipStartGrace is how long after its first skip decision the shared
// consumer takes a route durable that exists as in use: the worker's own
// route consumers, started with it, may not have pulled yet. It is short
// beside the quiet time a retirement needs (Retiring: several checks 5 s
// apart).
const skipStartGrace = 3 * time.Second

// skipView is the shared consumer's view of the route durables it skips
// for (Config.Skip): which subjects a route durable in use holds.
type skipView struct {
	mu     sync.Mutex
	since  time.Time // the first decision
	at     time.Time
	pulled map[string]bool // subject → its durable in use
	exists map[string]bool // subject → its durable exists
}

// skips reports whether the delivery of subject is left to its route's
// durable: subject is in Skip, and a route durable for it exists in use (a
// pull waiting, or a delivery outstanding), as read at most skipFresh ago,
// or exists at all in the first skipStartGrace. Otherwise the
// shared consumer records it itself; the route's durable, when it has the
// message too, finds a copy. Without that look a worker with
// NATS_CONSUMER_PER_ROUTE would go on skipping after the durable was
// retired (a worker without the setting deletes it after seeing no pull on
// it for a while, as when this worker was cut off from NATS), and what it
// skipped then would be recorded by no one.
func (c *Consumer) skips(ctx context.Context, subject string) bool {
	if !slices.Contains(c.cfg.Skip, subject) {
		return false
	}
	v := &c.skip
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.since.IsZero() {
		v.since = time.Now()
	}
	if age := time.Since(v.at); age >= skipFresh || (!v.pulled[subject] && age >= skipRecheck) {
		pulled, exists, err := c.routesPulled(ctx)
		if err != nil {
			c.cfg.Logger.Warn("could not read the route consumers; the shared consumer records their subjects itself meanwhile (copies are recognised)",
				"stream", c.cfg.Stream, "consumer", c.cfg.Durable, "error", err.Error())
		}
		v.at, v.pulled, v.exists = time.Now(), pulled, exists
	}
	return v.pulled[subject] || (v.exists[subject] && time.Since(v.since) < skipStartGrace)
}

// routesPulled lists the stream's route durables (named Durable-<route>,
// made by NewConsumer) and returns the subjects of those in use (a pull
// waiting on it, or a delivery outstanding: what Retiring waits to see end
// before it deletes one) and of all of them.
func (c *Consumer) routesPulled(ctx context.Context) (pulled, exists map[string]bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, c.cfg.Stream)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", c.cfg.Stream, err)
	}
	pulled, exists = map[string]bool{}, map[string]bool{}
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		if _, ok := routeOf(c.cfg.Durable, ci); !ok {
			continue
		}
		exists[ci.Config.FilterSubject] = true
		if ci.NumWaiting > 0 || ci.NumAckPending > 0 {
			pulled[ci.Config.FilterSubject] = true
		}
	}
	if err := list.Err(); err != nil {
		return nil, nil, fmt.Errorf("consumers of stream %s: %w", c.cfg.Stream, err)
	}
	return pulled, exists, nil
}
