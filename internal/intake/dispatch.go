package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// DispatcherConfig configures a Dispatcher. Zero values take the defaults
// noted per field.
type DispatcherConfig struct {
	// Interval between passes when the last one found nothing to do.
	// Default 1s.
	Interval time.Duration
	// BatchSize is the most pending rows of one route one claim takes.
	// Default 100.
	BatchSize int
	// MinAge leaves younger rows to the path that recorded them, so the
	// dispatcher picks up only what a crash or an outage left. Default 15s.
	MinAge time.Duration
	// Lease keeps a claimed batch from other dispatchers while its starts
	// run (they stop at 3/4 of it), and is how long a killed dispatcher's
	// rows wait. Default 20s.
	Lease time.Duration
	// Hold is how long a row whose payload this worker cannot decode is
	// left pending before it is tried again (by this worker or a newer
	// one); it is quarantined each time for the operator. Default 1h.
	Hold time.Duration
	// Concurrency bounds the workflow starts in flight per batch. Default 8.
	Concurrency int
	// Logger receives one line per failed start and per pass that
	// dispatched something. Default slog.Default().
	Logger *slog.Logger
}

func (c DispatcherConfig) withDefaults() DispatcherConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 100
	}
	if c.MinAge < 0 {
		c.MinAge = 0
	} else if c.MinAge == 0 {
		c.MinAge = 15 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 20 * time.Second
	}
	if c.Hold <= 0 {
		c.Hold = time.Hour
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// DispatcherStats counts what a Dispatcher did since it was created.
type DispatcherStats struct {
	// Started counts workflows this dispatcher started.
	Started int64
	// Duplicates counts claimed rows whose workflow was already started
	// (a crash between the start and the mark, or a start by another path).
	Duplicates int64
	// Failed counts starts that failed; their rows stay pending.
	Failed int64
	// Quarantined counts claims of recorded payloads that do not decode
	// here; each row stays pending (see DispatcherConfig.Hold).
	Quarantined int64
}

// Dispatcher starts the workflows of pending inbox rows: rows recorded by a
// consumer that acknowledged them and then died, or whose start failed while
// Temporal was unreachable. Any number of dispatchers can run against one
// database; each row is claimed by one of them at a time (a lease). It
// claims only rows of the consumers its route registry knows: during a
// rolling deploy that adds a message type, an older worker leaves the new
// type's rows pending for the newer ones.
type Dispatcher struct {
	in    *Intake
	cfg   DispatcherConfig
	claim store.DispatchOptions
	stats struct{ started, duplicates, failed, quarantined atomic.Int64 }
}

// NewDispatcher returns a Dispatcher that starts workflows through in.
func NewDispatcher(in *Intake, cfg DispatcherConfig) (*Dispatcher, error) {
	if in == nil {
		return nil, errors.New("dispatcher: intake is required")
	}
	cfg = cfg.withDefaults()
	var consumers []string
	for _, r := range in.cfg.Routes.Routes() {
		consumers = append(consumers, r.Consumer)
	}
	claim := store.DispatchOptions{MinAge: cfg.MinAge, Consumers: consumers, Lease: cfg.Lease, Hold: cfg.Hold}
	return &Dispatcher{in: in, cfg: cfg, claim: claim}, nil
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() DispatcherStats {
	return DispatcherStats{
		Started: d.stats.started.Load(), Duplicates: d.stats.duplicates.Load(),
		Failed: d.stats.failed.Load(), Quarantined: d.stats.quarantined.Load(),
	}
}

// Run dispatches until ctx ends, then returns nil once the batch in flight
// is settled. A pass that fails (Postgres unreachable) is logged and retried
// after a growing pause; Run never gives up on its own.
func (d *Dispatcher) Run(ctx context.Context) error {
	pause := d.cfg.Interval
	for {
		n, err := d.DispatchPending(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			d.cfg.Logger.Warn("dispatch pass failed", "error", err.Error(), "retry_in", pause.String())
			pause = min(2*pause, 30*time.Second)
		default:
			pause = d.cfg.Interval
			if n > 0 {
				d.cfg.Logger.Info("dispatched pending messages", "count", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

// DispatchPending makes one pass: it claims batches of pending rows older
// than MinAge, each route's share its room (Config.StartRate), until no
// route's share comes back full, and returns how many rows it settled.
func (d *Dispatcher) DispatchPending(ctx context.Context) (int, error) {
	total := 0
	routes := d.claim.Consumers
	for len(routes) > 0 {
		// Each route claims its own oldest rows, no more than its room: a
		// route out of it, or held, leaves the batch to the others, and a
		// backlog's rows do not fill another route's share.
		o := d.claim
		o.Consumers, o.Limits = nil, nil
		for _, c := range routes {
			if r := d.in.room(c, d.cfg.BatchSize); r > 0 {
				o.Consumers, o.Limits = append(o.Consumers, c), append(o.Limits, r)
			}
		}
		if len(o.Consumers) == 0 {
			return total, nil
		}
		claimed := map[string]int{}
		n, err := d.in.store.DispatchPending(ctx, o, func(ctx context.Context, batch []store.PendingMessage) []store.Dispatched {
			for _, p := range batch {
				claimed[p.Consumer]++
			}
			return d.startAll(ctx, batch)
		})
		total += n
		if err != nil {
			return total, err
		}
		// A batch none of which could be started (Temporal down, or its
		// routes out of room) ends the pass; otherwise the routes whose
		// share came back full go on.
		if n == 0 {
			return total, nil
		}
		routes = nil
		for i, c := range o.Consumers {
			if claimed[c] == o.Limits[i] {
				routes = append(routes, c)
			}
		}
	}
	return total, nil
}

// startAll starts the workflows of batch, Concurrency at a time, and returns
// the rows whose fate is settled. Each route's rows wait for its pace
// (Config.StartRate) in their own order, so a route's pace does not hold
// back another's rows; a route held (Config.Lines) leaves the rest of its
// rows for a later pass. The starts end before the claim's lease.
func (d *Dispatcher) startAll(ctx context.Context, batch []store.PendingMessage) []store.Dispatched {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Lease*3/4)
	defer cancel()
	var (
		mu      sync.Mutex
		done    = make([]store.Dispatched, 0, len(batch))
		wg      sync.WaitGroup
		sem     = make(chan struct{}, d.cfg.Concurrency)
		byRoute = map[string][]store.PendingMessage{}
		order   []string
	)
	for _, p := range batch {
		if _, ok := byRoute[p.Consumer]; !ok {
			order = append(order, p.Consumer)
		}
		byRoute[p.Consumer] = append(byRoute[p.Consumer], p)
	}
	for _, c := range order {
		wg.Go(func() {
			var starts sync.WaitGroup
			defer starts.Wait()
			for _, p := range byRoute[c] {
				if !d.in.admit(ctx, c) {
					return // the rest released for a later pass
				}
				sem <- struct{}{}
				starts.Go(func() {
					defer func() { <-sem }()
					wfID, ok := d.startOne(ctx, p)
					if ok {
						mu.Lock()
						done = append(done, store.Dispatched{Consumer: p.Consumer, MessageID: p.MessageID, WorkflowID: wfID})
						mu.Unlock()
					}
				})
			}
		})
	}
	wg.Wait()
	return done
}

// startOne starts p's workflow. ok=false leaves the row pending for the next
// pass; ok with an empty workflowID leaves it pending for Hold.
func (d *Dispatcher) startOne(ctx context.Context, p store.PendingMessage) (workflowID string, ok bool) {
	wfID, started, err := d.in.startRecorded(ctx, p)
	switch {
	case errors.Is(err, errUnstartable):
		d.stats.quarantined.Add(1)
		return "", true
	case err != nil:
		d.stats.failed.Add(1)
		d.cfg.Logger.Warn("start failed; the message stays pending", "message_id", p.MessageID, "consumer", p.Consumer, "error", err.Error())
		return "", false
	case started:
		d.stats.started.Add(1)
	default:
		d.stats.duplicates.Add(1)
		d.cfg.Logger.Info("pending message's workflow was already started", "message_id", p.MessageID, "workflow_id", wfID)
	}
	return wfID, true
}

// errUnstartable marks a recorded message this worker cannot start; it was
// quarantined for the operator, and its row stays pending.
var errUnstartable = errors.New("recorded message cannot be started")

// startRecorded starts the workflow of a recorded inbox row. A payload that
// does not decode here (a validation rule tightened since it was recorded,
// say) is quarantined and reported as errUnstartable.
func (in *Intake) startRecorded(ctx context.Context, p store.PendingMessage) (workflowID string, started bool, err error) {
	m, derr := in.cfg.Routes.Decode(p.Payload)
	if derr == nil && (m.Consumer != p.Consumer || m.ID != p.MessageID) {
		derr = fmt.Errorf("recorded payload names %s/%s, the row %s/%s", m.Consumer, m.ID, p.Consumer, p.MessageID)
	}
	if derr != nil {
		if _, err := in.reject(ctx, p.Payload, "inbox", p.Consumer, p.MessageID, store.ReasonInvalid,
			fmt.Errorf("recorded message cannot be started: %w", derr)); err != nil {
			return "", false, err
		}
		return "", false, errUnstartable
	}
	wfID, err := identity.WorkflowID(m.Consumer, m.ID)
	if err != nil {
		return "", false, err
	}
	started, err = in.Start(ctx, m)
	return wfID, started, err
}
