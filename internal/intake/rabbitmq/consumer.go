package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/retention"
)

// ErrStale reports a settle of a delivery from an earlier connection: the
// broker requeued it when that connection closed, and its delivery tag
// means nothing (or another message) on the current one.
var ErrStale = errors.New("delivery from an earlier connection: not settled, the broker redelivers it")

// BrokerStats counts what a Consumer did on the broker's side, beside its
// Path's SourceStats.
type BrokerStats struct {
	// Connections counts connections opened (the generation).
	Connections int64
	// Acked counts acks sent; Rejected, rejects with requeue.
	Acked, Rejected int64
	// Stale counts settles refused because the delivery came from an
	// earlier connection.
	Stale int64
	// DeadLetters counts dead-lettered messages quarantined.
	DeadLetters int64
	// DeadLettersRenewed counts dead letters published again to their
	// queue (and the returned one acked) to reset their return count.
	DeadLettersRenewed int64
}

// Consumer is the RabbitMQ source: it consumes a quorum queue into its
// intake.Path, which records each delivery (inbox, or quarantine) before
// the settle says ack; a delivery that cannot be recorded is held for the
// verdict's delay and rejected with requeue, and on delivery MaxDeliver the
// Path quarantines it. What the broker dead-letters (TTL passed, delivery
// limit) is quarantined from DeadLetterQueue. On a lost connection the
// consumer dials again with a new generation: a delivery of an earlier
// generation is never settled (ErrStale) — the broker has requeued it.
type Consumer struct {
	path *intake.Path
	cfg  Config

	gen   atomic.Uint64 // generations handed out: one per connection
	live  atomic.Uint64 // generation of the open connection; 0 while none is
	stats struct{ acked, rejected, stale, deadLetters, renewed atomic.Int64 }
	// hooks are set by tests only (export_test.go); nil in the product.
	hooks *testHooks
}

// testHooks are the faults a test makes; nothing outside a _test.go file
// can set them.
type testHooks struct {
	// afterRecord runs between the inbox commit and the ack.
	afterRecord func(d *Delivery)
	// dial replaces Dial, so that a test can drop the connections.
	dial func(url, name string) (*amqp.Connection, error)
	// dropSettles makes every ack and reject vanish (reported as sent).
	dropSettles bool
	// crashed refuses every settle from now on.
	crashed atomic.Bool
}

func (c *Consumer) dial(url, name string) (*amqp.Connection, error) {
	if c.hooks != nil && c.hooks.dial != nil {
		return c.hooks.dial(url, name)
	}
	return Dial(url, name)
}

var _ intake.Source = (*Consumer)(nil)

// watchSetup bounds a setup on conn by cfg.SetupTimeout, counting a
// timeout (see the package's watchSetup).
func (c *Consumer) watchSetup(ctx context.Context, conn *amqp.Connection) func(error) error {
	return watchSetup(ctx, conn, c.cfg.SetupTimeout, func() { c.cfg.Metrics.SetupTimeout(c.cfg.Name) })
}

// NewConsumer returns a Consumer recording into in. Nothing is declared or
// consumed before Run.
func NewConsumer(in *intake.Intake, cfg Config) (*Consumer, error) {
	if in == nil {
		return nil, errors.New("rabbitmq consumer: intake is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rabbitmq consumer: %w", err)
	}
	cfg = cfg.withDefaults()
	path, err := intake.NewPath(in, intake.PathConfig{Source: cfg.Name, Starters: cfg.Starters, RetryBackoff: cfg.RetryDelays,
		Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Consumer{path: path, cfg: cfg}, nil
}

// Name is the source's name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Stats returns the Path's counters.
func (c *Consumer) Stats() intake.SourceStats { return c.path.Stats() }

// BrokerStats returns the broker-side counters.
func (c *Consumer) BrokerStats() BrokerStats {
	s := &c.stats
	return BrokerStats{Connections: int64(c.gen.Load()), //nolint:gosec // a count of connections
		Acked: s.acked.Load(), Rejected: s.rejected.Load(), Stale: s.stale.Load(), DeadLetters: s.deadLetters.Load(),
		DeadLettersRenewed: s.renewed.Load()}
}

// Config returns the configuration with its defaults applied.
func (c *Consumer) Config() Config { return c.cfg }

// Check is ready while the consumer has an open connection consuming.
func (c *Consumer) Check() health.Check {
	return health.Check{Name: "source." + c.cfg.Name, Fn: func(context.Context) error {
		if c.live.Load() == 0 {
			return fmt.Errorf("rabbitmq consumer of %s: not connected", c.cfg.Queue)
		}
		return nil
	}}
}

// Horizon is the queue's message TTL, checked on the broker: Declare
// succeeds only when the queue has exactly the configured x-message-ttl
// (an operator's policy can only shorten it: the lower one applies). A
// queue without one is refused with ErrNoHorizon. A re-publish is a new
// message with a TTL of its own, which only the inbox recognises.
func (c *Consumer) Horizon(ctx context.Context) (retention.SourceHorizon, error) {
	if _, err := c.cfg.Horizon(); err != nil {
		return retention.SourceHorizon{}, fmt.Errorf("source %s: %w", c.cfg.Name, err)
	}
	conn, err := c.dial(c.cfg.URL, "effectively worker horizon check")
	if err != nil {
		return retention.SourceHorizon{}, err
	}
	defer func() { _ = CloseConn(conn) }()
	fail := c.watchSetup(ctx, conn)
	ch, err := conn.Channel()
	if err != nil {
		return retention.SourceHorizon{}, fmt.Errorf("source %s: open channel: %w", c.cfg.Name, fail(err))
	}
	if err := fail(Declare(ch, c.cfg)); err != nil {
		return retention.SourceHorizon{}, fmt.Errorf("source %s: %w", c.cfg.Name, err)
	}
	return retention.SourceHorizon{Source: c.cfg.Name, Redelivery: c.cfg.MessageTTL,
		Basis: fmt.Sprintf("queue %s: x-message-ttl %s (a message not acked by then is dead-lettered to %s and quarantined)", c.cfg.Queue, c.cfg.MessageTTL, c.cfg.DeadLetterQueue)}, nil
}

// Delivery is one message as a connection of generation Gen delivered it.
type Delivery struct {
	amqp.Delivery
	// Gen is the generation of the connection that delivered it.
	Gen uint64
	// Attempts is what the delivery says about earlier deliveries.
	Attempts Attempts
}

// settle runs fn (an ack or reject of d) unless d's connection is no longer
// the open one. The Delivery's acknowledger is its own channel, which a
// reconnect never reuses, so a stale ack fails there too; the generation
// makes the refusal explicit, counted, and independent of amqp091's
// recovery settings.
func (c *Consumer) settle(d *Delivery, fn func() error) error {
	if d.Gen != c.live.Load() {
		c.stats.stale.Add(1)
		return ErrStale
	}
	if h := c.hooks; h != nil {
		switch {
		case h.crashed.Load():
			return errors.New("crashed (test)")
		case h.dropSettles:
			return nil
		}
	}
	return fn()
}

// Ack acknowledges d after its inbox commit.
func (c *Consumer) Ack(d *Delivery) error {
	err := c.settle(d, func() error { return d.Ack(false) })
	if err == nil {
		c.stats.acked.Add(1)
	}
	return err
}

// Reject hands d back to the queue for another delivery; both RabbitMQ 3.x
// and 4.3 count a reject toward the delivery limit.
func (c *Consumer) Reject(d *Delivery) error {
	err := c.settle(d, func() error { return d.Reject(true) })
	if err == nil {
		c.stats.rejected.Add(1)
	}
	return err
}

// Run consumes until ctx ends, reconnecting after a lost connection. On
// shutdown it cancels the consumer, settles every delivery already
// received, lets the starts in flight finish and returns nil.
func (c *Consumer) Run(ctx context.Context) error {
	c.path.Open(ctx)
	defer c.path.Close()
	var dead sync.WaitGroup
	dead.Go(func() { c.runDeadLetters(ctx) })
	defer dead.Wait()
	// Short at first: a consume right after the queue was created can meet
	// a quorum queue whose leader is not elected yet (541 INTERNAL_ERROR,
	// seen on 3.10.8), gone a moment later.
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if connected {
			pause = 100 * time.Millisecond
		}
		c.cfg.Logger.Warn("rabbitmq consumer disconnected; reconnecting", "queue", c.cfg.Queue, "error", errString(err), "retry_in", pause.String())
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// session runs one connection: declare, qos, consume, settle, until the
// connection or channel closes or ctx ends. connected reports whether the
// consumer got as far as consuming.
func (c *Consumer) session(ctx context.Context) (connected bool, err error) {
	conn, err := c.dial(c.cfg.URL, "effectively worker "+c.cfg.Queue)
	if err != nil {
		return false, err
	}
	defer func() { _ = CloseConn(conn) }()
	fail := c.watchSetup(ctx, conn)
	version, err := ServerVersion(conn.Properties)
	if err != nil {
		return false, fail(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fail(fmt.Errorf("open channel: %w", err))
	}
	if err := Declare(ch, c.cfg); err != nil {
		return false, fail(err)
	}
	// Per channel (global=false): global QoS on a quorum queue is refused
	// with 540 NOT_IMPLEMENTED, which closes the whole connection.
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fail(fmt.Errorf("qos: %w", err))
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	gen := c.gen.Add(1)
	c.live.Store(gen)
	sctx, lost := context.WithCancel(ctx)
	defer lost()
	tag := fmt.Sprintf("effectively-%d", gen)
	msgs, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err = fail(err); err != nil {
		c.live.CompareAndSwap(gen, 0)
		return false, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	c.cfg.Logger.Info("rabbitmq consumer connected", "queue", c.cfg.Queue, "server_version", version.String(), "generation", gen)

	deliveries := make(chan *Delivery)
	var handlers sync.WaitGroup
	for range c.cfg.Handlers {
		handlers.Go(func() {
			for d := range deliveries {
				c.handle(ctx, sctx, d)
			}
		})
	}
	drained := false // the consumer was cancelled on shutdown and msgs is done
	defer func() {
		if !drained {
			// The connection is gone: what the handlers hold was requeued,
			// their settles are stale from now on.
			c.live.CompareAndSwap(gen, 0)
			lost()
		}
		close(deliveries)
		handlers.Wait()
		c.live.CompareAndSwap(gen, 0)
		if drained {
			settleBeforeClose(conn, ch, c.cfg.Prefetch)
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		// Stop new deliveries; what was received still comes out of msgs,
		// which closes after the cancel-ok. A broker that never sends it
		// would hold the shutdown: past CloseTimeout the connection is
		// closed, and what it delivered unsettled goes back to the queue.
		defer closeUnanswered(conn).Stop()
		_ = ch.Cancel(tag, false)
	})
	defer stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					drained = true
					return true, nil
				}
				select {
				case e := <-chClosed:
					return true, e
				case e := <-closed:
					return true, e
				case <-time.After(time.Second):
					return true, errors.New("consumer cancelled by the broker (queue deleted?)")
				}
			}
			deliveries <- &Delivery{Delivery: m, Gen: gen, Attempts: AttemptsOf(version, m.Headers)}
		case e := <-closed:
			// The deliveries still in msgs are from a dead connection: the
			// broker requeued them. Handlers holding one find it stale.
			return true, e
		}
	}
}

// settleBeforeClose gives the acks just sent time to reach the queue
// before the connection closes. A quorum queue's channel hands settles to
// the queue asynchronously and buffers them when many are in flight; closing
// right after the last ack returned some acked messages to the queue here
// (3.10.8: about 1 in 6 of those acked during the drain), each then a copy
// the inbox recognises. A round trip makes the channel take every ack; the
// pause lets it pass them on. Lost acks stay possible (a crash): they cost a
// copy, never a message.
func settleBeforeClose(conn *amqp.Connection, ch *amqp.Channel, prefetch int) {
	defer closeUnanswered(conn).Stop()
	if err := ch.Qos(prefetch, 0, false); err != nil { // basic.qos-ok: a round trip
		return
	}
	time.Sleep(300 * time.Millisecond)
}

// handle hands one delivery to the Path, which settles it through
// settleFn. ctx is the Run context (maybe cancelled: a received delivery is
// settled anyway); sctx ends with d's connection.
func (c *Consumer) handle(ctx, sctx context.Context, d *Delivery) {
	c.path.Handle(ctx, intake.Delivery{
		Raw:      d.Body,
		Source:   c.cfg.Name,
		Attempt:  d.Attempts.Delivery,
		Last:     d.Attempts.Delivery >= c.cfg.MaxDeliver,
		Headers:  headerCarrier(d.Headers),
		Position: fmt.Sprintf("queue %s delivery %d (connection %d, tag %d)", c.cfg.Queue, d.Attempts.Delivery, d.Gen, d.DeliveryTag),
		Attributes: []attribute.KeyValue{
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.destination.name", c.cfg.Queue),
			attribute.Int("messaging.rabbitmq.delivery", d.Attempts.Delivery),
		},
		Settle: func(_ context.Context, v intake.Verdict) error { return c.settleVerdict(sctx, d, v) },
	})
}

// settleVerdict carries out v: ack (recorded, a copy, or quarantined), or
// hold for v.Delay and reject with requeue (RabbitMQ redelivers a rejected
// message at once; the hold keeps a Postgres outage from spinning it).
func (c *Consumer) settleVerdict(sctx context.Context, d *Delivery, v intake.Verdict) error {
	switch v.Settle {
	case intake.SettleAck, intake.SettleQuarantined:
		if c.hooks != nil && c.hooks.afterRecord != nil {
			c.hooks.afterRecord(d)
		}
		return c.Ack(d)
	case intake.SettleRetry:
		select {
		case <-sctx.Done(): // shutting down, or the connection is gone: hand it back now
		case <-time.After(v.Delay):
		}
		return c.Reject(d)
	default:
		return fmt.Errorf("unknown settlement %q", v.Settle)
	}
}
