package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/retention"
)

// consumerDescription marks the durables NewConsumer creates.
const consumerDescription = "effectively: order messages into the Postgres inbox"

// Leftovers finds the route consumers that NATS_CONSUMER_PER_ROUTE left on
// shared's stream: durables named shared.Durable-<consumer> that
// NewConsumer created. Each comes back as the Config that made it (Name
// shared.Name-<consumer>, its subject, StartAfter shared.Durable), for
// NewRetiring.
func Leftovers(ctx context.Context, js natsjs.JetStream, shared Config) ([]Config, error) {
	shared = shared.withDefaults()
	st, err := js.Stream(ctx, shared.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", shared.Stream, err)
	}
	var out []Config
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		suffix, ok := routeOf(shared.Durable, ci)
		if !ok {
			continue
		}
		rc := shared
		rc.Name, rc.Durable, rc.Subject = shared.Name+"-"+suffix, ci.Name, ci.Config.FilterSubject
		rc.StartAfter, rc.Skip, rc.OneRoute = shared.Durable, nil, false
		out = append(out, rc)
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("consumers of stream %s: %w", shared.Stream, err)
	}
	return out, nil
}

// routeOf reports whether ci is a route durable NewConsumer made beside
// the shared durable (named shared-<route>, with consumerDescription), and
// the route's part of its name.
func routeOf(shared string, ci *natsjs.ConsumerInfo) (route string, ok bool) {
	route, ok = strings.CutPrefix(ci.Name, shared+"-")
	return route, ok && route != "" && ci.Config.Description == consumerDescription
}

// retireEvery spaces a Retiring's checks; retireQuiet is how many checks in
// a row must find no pull and no delivery outstanding before it reads its
// bound. Variables for the tests.
var (
	retireEvery = 5 * time.Second
	retireQuiet = 3
)

// Retiring is a route's consumer left by NATS_CONSUMER_PER_ROUTE, run by a
// worker without the setting, whose shared consumer records every subject.
// While the setting was on, the shared consumer acked the route's messages
// without recording them, so the route's consumer may hold messages no one
// else will record: a worker stopped with a backlog in it, or a worker
// still running with the setting on during a rolling deploy.
//
// Every few seconds it reads the durable's state. While a worker pulls from
// it (a worker with the setting on, which records the route's messages
// itself), it waits. Otherwise it records what the durable holds, the way
// the route's consumer would; copies of what the shared consumer recorded
// are counted as duplicates. After several checks in a row have found no
// pull and no delivery outstanding, no worker with the setting on is left
// to skip a message, so every skipped message is at or before the shared
// consumer's last delivered sequence: once the durable has delivered and
// settled up to there, and its dead letters (read only while it runs) hold
// nothing unrecorded, it is deleted.
type Retiring struct {
	c       *Consumer
	horizon retention.SourceHorizon
	retired atomic.Bool
}

var _ intake.Source = (*Retiring)(nil)

// NewRetiring attaches to the existing durable cfg names (from Leftovers);
// it creates nothing. An error wrapping natsjs.ErrConsumerNotFound means
// another worker deleted it meanwhile.
func NewRetiring(ctx context.Context, in *intake.Intake, js natsjs.JetStream, cfg Config) (*Retiring, error) {
	if cfg.StartAfter == "" {
		return nil, errors.New("jetstream retiring consumer: StartAfter must name the shared consumer")
	}
	cfg.OneRoute = false // its backlog is what others skipped: nothing to keep waiting
	cfg, path, err := newPath(in, js, cfg, "jetstream retiring consumer")
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, cfg.Stream, cfg.Durable)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
	}
	dead, err := EnsureDeadLetters(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	r := &Retiring{c: &Consumer{path: path, js: js, cons: cons, dead: dead, cfg: cfg}}
	// Its redelivery window counts while it runs; once it is deleted it
	// delivers nothing more, and the next start leaves it out.
	if r.horizon, err = r.c.Horizon(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Name is the route consumer's source name (jetstream-<consumer>).
func (r *Retiring) Name() string { return r.c.cfg.Name }

// Stats returns the counters of what it recorded.
func (r *Retiring) Stats() intake.SourceStats { return r.c.path.Stats() }

// Horizon is the durable's redelivery window as read at its start.
func (r *Retiring) Horizon(context.Context) (retention.SourceHorizon, error) { return r.horizon, nil }

// Retired reports whether the durable is gone (deleted here or elsewhere).
func (r *Retiring) Retired() bool { return r.retired.Load() }

// Check is ready when the broker answers for the durable, or it is gone.
func (r *Retiring) Check() health.Check {
	return health.Check{Name: "source." + r.c.cfg.Name, Fn: func(ctx context.Context) error {
		if r.retired.Load() {
			return nil
		}
		if _, err := r.c.durable().Info(ctx); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
			return fmt.Errorf("jetstream consumer %s on stream %s: %w", r.c.cfg.Durable, r.c.cfg.Stream, err)
		}
		return nil
	}}
}

// retireState is what the checks carry from one to the next.
type retireState struct {
	quiet int    // checks in a row with no pull and no delivery outstanding
	bound uint64 // the shared consumer's last delivered sequence, read after them; 0: none yet
}

// Run checks the durable every few seconds, records what it holds while no
// worker pulls from it, and deletes it once that is safe (see Retiring);
// it returns nil then, or when ctx ends.
func (r *Retiring) Run(ctx context.Context) error {
	r.c.path.Open(ctx)
	defer r.c.path.Close()
	if r.c.dead != nil {
		// Its dead letters, while it runs: a last delivery it made that no
		// worker settled.
		dctx, stop := context.WithCancel(ctx)
		var dead sync.WaitGroup
		dead.Go(func() { r.c.runDeadLetters(dctx, r.c.dead) })
		defer dead.Wait()
		defer stop()
	}
	r.c.cfg.Logger.Info("a route's consumer left by NATS_CONSUMER_PER_ROUTE: recording what it holds while no worker with the setting on pulls from it, then deleting it",
		"stream", r.c.cfg.Stream, "consumer", r.c.cfg.Durable)
	var st retireState
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		done, err := r.check(ctx, &st)
		if done {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			r.c.cfg.Logger.Warn("checking a route's consumer left by NATS_CONSUMER_PER_ROUTE failed; trying again",
				"stream", r.c.cfg.Stream, "consumer", r.c.cfg.Durable, "error", err.Error(), "retry_in", retireEvery.String())
		}
		t.Reset(retireEvery)
	}
}

// check is one look at the durable: it records what the durable holds when
// no worker pulls from it, and deletes it once the bound is passed.
func (r *Retiring) check(ctx context.Context, st *retireState) (done bool, err error) {
	info, err := r.info(ctx)
	if err != nil || info == nil {
		return info == nil && err == nil, err
	}
	if info.NumWaiting > 0 {
		// A worker with the setting on pulls from it and records the
		// route's messages; it may skip more on the shared consumer.
		st.quiet, st.bound = 0, 0
		return false, nil
	}
	if info.NumAckPending == 0 {
		st.quiet++
	} else {
		st.quiet, st.bound = 0, 0
	}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		if err := r.drain(ctx); err != nil {
			return false, err
		}
	}
	if st.bound == 0 && st.quiet >= retireQuiet {
		// No worker with the setting on is left: each message it skipped
		// was delivered by the shared consumer by now.
		shared, err := r.c.js.Consumer(ctx, r.c.cfg.Stream, r.c.cfg.StartAfter)
		switch {
		case errors.Is(err, natsjs.ErrConsumerNotFound):
			st.bound = 1 // no shared consumer: nothing was skipped since it went
		case err != nil:
			return false, fmt.Errorf("consumer %s on stream %s: %w", r.c.cfg.StartAfter, r.c.cfg.Stream, err)
		default:
			st.bound = max(shared.CachedInfo().Delivered.Stream, 1)
		}
	}
	if st.bound == 0 {
		return false, nil
	}
	if info, err = r.info(ctx); err != nil || info == nil {
		return info == nil && err == nil, err
	}
	if info.NumWaiting > 0 || info.NumAckPending > 0 || (info.NumPending > 0 && info.Delivered.Stream < st.bound) {
		return false, nil
	}
	if left, err := r.deadLettersLeft(ctx); err != nil || left {
		// A last delivery it made that no one settled waits in its dead
		// letters, whose reader runs only while it does: it stays until
		// that is recorded or quarantined.
		return false, err
	}
	if err := r.c.js.DeleteConsumer(ctx, r.c.cfg.Stream, r.c.cfg.Durable); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
		return false, fmt.Errorf("delete consumer %s on stream %s: %w", r.c.cfg.Durable, r.c.cfg.Stream, err)
	}
	r.retired.Store(true)
	r.c.cfg.Logger.Info("deleted a route's consumer left by NATS_CONSUMER_PER_ROUTE: everything the shared consumer skipped is recorded",
		"stream", r.c.cfg.Stream, "consumer", r.c.cfg.Durable, "recorded", r.Stats().Recorded, "through_seq", st.bound)
	return true, nil
}

// deadLettersLeft reports whether the durable's dead letters hold an
// advisory not yet recorded or quarantined (waiting, or held by the
// reader). Without dead letters, none.
func (r *Retiring) deadLettersLeft(ctx context.Context) (bool, error) {
	if r.c.dead == nil {
		return false, nil
	}
	info, err := r.c.dead.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("dead-letter consumer of %s: %w", r.c.cfg.Durable, err)
	}
	return info.NumPending > 0 || info.NumAckPending > 0, nil
}

// info reads the durable's state; nil and no error when it is gone.
func (r *Retiring) info(ctx context.Context) (*natsjs.ConsumerInfo, error) {
	info, err := r.c.durable().Info(ctx)
	if errors.Is(err, natsjs.ErrConsumerNotFound) {
		if !r.retired.Swap(true) {
			r.c.cfg.Logger.Info("a route's consumer left by NATS_CONSUMER_PER_ROUTE is gone (another worker deleted it)",
				"stream", r.c.cfg.Stream, "consumer", r.c.cfg.Durable)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s on stream %s: %w", r.c.cfg.Durable, r.c.cfg.Stream, err)
	}
	return info, nil
}

// drain fetches and records batches until one comes back empty (or ctx
// ends), Handlers deliveries at a time.
func (r *Retiring) drain(ctx context.Context) error {
	sem := make(chan struct{}, r.c.cfg.Handlers)
	for ctx.Err() == nil {
		batch, err := r.c.durable().Fetch(r.c.cfg.FetchBatch, natsjs.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("fetch from consumer %s: %w", r.c.cfg.Durable, err)
		}
		n := 0
		var handlers sync.WaitGroup
		for msg := range batch.Messages() {
			n++
			sem <- struct{}{}
			handlers.Go(func() {
				defer func() { <-sem }()
				r.c.handle(ctx, msg)
			})
		}
		handlers.Wait()
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return fmt.Errorf("fetch from consumer %s: %w", r.c.cfg.Durable, err)
		}
		if n == 0 {
			return nil
		}
	}
	return nil
}
