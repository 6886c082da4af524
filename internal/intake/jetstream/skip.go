package jetstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// skipView is the shared consumer's view of the route durables it skips
// for (Config.Skip): which subjects a route durable in use holds.
type skipView struct {
	mu     sync.Mutex
	at     time.Time
	pulled map[string]bool
}

// skips reports whether the delivery of subject is left to its route's
// durable: subject is in Skip, and a route durable for it exists in use (a
// pull waiting, or a delivery outstanding), as read at most skipFresh ago. Otherwise the
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
	if age := time.Since(v.at); age >= skipFresh || (!v.pulled[subject] && age >= skipRecheck) {
		pulled, err := c.routesPulled(ctx)
		if err != nil {
			c.cfg.Logger.Warn("could not read the route consumers; the shared consumer records their subjects itself meanwhile (copies are recognised)",
				"stream", c.cfg.Stream, "consumer", c.cfg.Durable, "error", err.Error())
		}
		v.at, v.pulled = time.Now(), pulled
	}
	return v.pulled[subject]
}

// routesPulled lists the stream's route durables (named Durable-<route>,
// made by NewConsumer) and returns the subjects of those in use: a pull
// waiting on it, or a delivery outstanding (what Retiring waits to see end
// before it deletes one).
func (c *Consumer) routesPulled(ctx context.Context) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	st, err := c.js.Stream(ctx, c.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", c.cfg.Stream, err)
	}
	pulled := map[string]bool{}
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		if suffix, ok := strings.CutPrefix(ci.Name, c.cfg.Durable+"-"); ok && suffix != "" &&
			ci.Config.Description == consumerDescription && (ci.NumWaiting > 0 || ci.NumAckPending > 0) {
			pulled[ci.Config.FilterSubject] = true
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("consumers of stream %s: %w", c.cfg.Stream, err)
	}
	return pulled, nil
}
