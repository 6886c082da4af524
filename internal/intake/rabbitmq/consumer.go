package rabbitmq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// ErrStale reports a settle of a delivery from an earlier connection: the
// broker requeued it when that connection closed, and its delivery tag
// means nothing (or another message) on the current one.
var ErrStale = errors.New("delivery from an earlier connection: not settled, the broker redelivers it")

// Stats counts what a Consumer did since it was created.
type Stats struct {
	Delivered, Recorded, Duplicates, Invalid, MaxDelivered, Retried, Started int64
	// Acked counts acks sent.
	Acked int64
	// Stale counts settles refused because the delivery came from an
	// earlier connection.
	Stale int64
	// Connections counts connections opened (the generation).
	Connections int64
}

// Consumer consumes a quorum queue into the inbox: each delivery is
// recorded (inbox INSERT … ON CONFLICT, or quarantine), acked only once that
// has committed, and its workflow started after the ack; what that does not
// start, a Dispatcher does.
//
// A delivery that cannot be recorded (Postgres unreachable) is held for a
// delay and rejected with requeue; on delivery MaxDeliver it is quarantined
// instead. What the broker dead-letters (TTL passed, delivery limit) is
// quarantined by DeadLetters. On a lost connection the consumer reconnects
// with a new generation: a delivery of an earlier generation is never
// acked (ErrStale) — the broker has requeued it.
type Consumer struct {
	in  *intake.Intake
	cfg Config

	gen   atomic.Uint64 // generations handed out: one per connection
	live  atomic.Uint64 // generation of the open connection; 0 while none is
	stats struct {
		delivered, recorded, duplicates, invalid, maxDelivered, retried, started, stale, acked atomic.Int64
	}
	// afterRecord, in tests, runs between the inbox commit and the ack.
	afterRecord func(d *Delivery)
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
	return &Consumer{in: in, cfg: cfg.withDefaults()}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Delivered: s.delivered.Load(), Recorded: s.recorded.Load(), Duplicates: s.duplicates.Load(), Invalid: s.invalid.Load(),
		MaxDelivered: s.maxDelivered.Load(), Retried: s.retried.Load(), Started: s.started.Load(), Stale: s.stale.Load(), Acked: s.acked.Load(),
		Connections: int64(c.gen.Load()), //nolint:gosec // a count of connections, far below 2^63
	}
}

// Config returns the configuration with its defaults applied.
func (c *Consumer) Config() Config { return c.cfg }

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

// Reject hands d back to the queue for another delivery.
func (c *Consumer) Reject(d *Delivery) error {
	return c.settle(d, func() error { return d.Reject(true) })
}

// Run consumes until ctx ends, reconnecting after a lost connection. On
// shutdown it cancels the consumer, settles every delivery already
// received, lets the starts in flight finish and returns nil.
func (c *Consumer) Run(ctx context.Context) error {
	starts := make(chan fastStart, c.cfg.Prefetch*2)
	var starters sync.WaitGroup
	for range c.cfg.Starters {
		starters.Go(func() {
			for s := range starts {
				if ctx.Err() == nil {
					c.startFast(ctx, s)
				}
			}
		})
	}
	defer func() {
		close(starts)
		starters.Wait()
	}()
	var dead sync.WaitGroup
	dead.Go(func() { c.runDeadLetters(ctx) })
	defer dead.Wait()
	pause := 500 * time.Millisecond
	for ctx.Err() == nil {
		connected, err := c.session(ctx, starts)
		if ctx.Err() != nil {
			break
		}
		if connected {
			pause = 500 * time.Millisecond
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
func (c *Consumer) session(ctx context.Context, starts chan<- fastStart) (connected bool, err error) {
	conn, err := Dial(c.cfg.URL, "effectively worker "+c.cfg.Queue)
	if err != nil {
		return false, err
	}
	defer conn.Close() //nolint:errcheck // closing a connection that may be gone
	version, err := ServerVersion(conn.Properties)
	if err != nil {
		return false, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if err := Declare(ch, c.cfg); err != nil {
		return false, err
	}
	// Per channel (global=false): global QoS on a quorum queue is refused
	// with 540 NOT_IMPLEMENTED, which closes the whole connection.
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	gen := c.gen.Add(1)
	c.live.Store(gen)
	sctx, lost := context.WithCancel(ctx)
	defer lost()
	tag := fmt.Sprintf("effectively-%d", gen)
	msgs, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume %s: %w", c.cfg.Queue, err)
	}
	c.cfg.Logger.Info("rabbitmq consumer connected", "queue", c.cfg.Queue, "server_version", version.String(), "generation", gen)

	deliveries := make(chan *Delivery)
	var handlers sync.WaitGroup
	for range c.cfg.Handlers {
		handlers.Go(func() {
			for d := range deliveries {
				c.handle(ctx, sctx, d, starts)
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
			settleBeforeClose(ch, c.cfg.Prefetch)
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		// Stop new deliveries; what was received still comes out of msgs,
		// which closes after the cancel-ok.
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
			c.stats.delivered.Add(1)
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
func settleBeforeClose(ch *amqp.Channel, prefetch int) {
	if err := ch.Qos(prefetch, 0, false); err != nil { // basic.qos-ok: a round trip
		return
	}
	time.Sleep(300 * time.Millisecond)
}

// fastStart is a message to start after its ack, with its delivery's span.
type fastStart struct {
	m    *message.Message
	span trace.SpanContext
}

func (c *Consumer) startFast(ctx context.Context, s fastStart) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	sctx = trace.ContextWithSpanContext(sctx, s.span)
	started, err := c.in.Dispatch(sctx, s.m)
	if err != nil {
		c.cfg.Logger.Warn("start after ack failed; the dispatcher will retry", "message_id", s.m.ID, "error", err.Error())
		return
	}
	if started {
		c.stats.started.Add(1)
	}
}

// handle settles one delivery. It is called with the Run context, which may
// already be cancelled: a received delivery is settled anyway.
// sctx ends with the connection that delivered d.
func (c *Consumer) handle(ctx, sctx context.Context, d *Delivery, starts chan<- fastStart) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	hctx = tracing.Propagator.Extract(hctx, headerCarrier(d.Headers))
	hctx, span := tracing.Tracer().Start(hctx, "intake receive", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.destination.name", c.cfg.Queue),
			attribute.Int("messaging.rabbitmq.delivery", d.Attempts.Delivery),
		))
	defer span.End()
	last := d.Attempts.Delivery >= c.cfg.MaxDeliver
	record := c.in.RecordKnown
	if last {
		record = c.in.Record
	}
	rec, err := record(hctx, d.Body, SourceRabbitMQ)
	if err != nil {
		span.SetStatus(codes.Error, "not recorded")
		c.fail(sctx, d, last, err)
		return
	}
	span.SetAttributes(attribute.String("effectively.message_id", rec.MessageID), attribute.String("effectively.intake.status", string(rec.Status)))
	switch {
	case rec.Status == intake.StatusInvalid:
		c.stats.invalid.Add(1)
	case rec.New:
		c.stats.recorded.Add(1)
	default:
		c.stats.duplicates.Add(1)
	}
	if c.afterRecord != nil {
		c.afterRecord(d)
	}
	if err := c.Ack(d); err != nil {
		// Lost ack: the broker redelivers, the inbox recognises the copy.
		c.cfg.Logger.Warn("ack not sent; the redelivery will be recognised", "message_id", rec.MessageID, "error", err.Error())
		return
	}
	if rec.Pending && rec.Message != nil && (rec.New || d.Redelivered) {
		select {
		case starts <- fastStart{m: rec.Message, span: span.SpanContext()}:
		default: // starters busy: the dispatcher picks it up
		}
	}
}

// fail hands back a delivery that could not be recorded after a delay, or
// quarantines it on its last delivery. ctx ends on shutdown or with d's
// connection.
func (c *Consumer) fail(ctx context.Context, d *Delivery, last bool, cause error) {
	if last {
		c.quarantineLast(ctx, d, cause)
		return
	}
	delays := c.cfg.RetryDelays
	var delay time.Duration
	if len(delays) > 0 {
		delay = delays[min(d.Attempts.Delivery, len(delays))-1]
	}
	c.cfg.Logger.Warn("message not recorded; rejecting it for a redelivery", "delivery", d.Attempts.Delivery,
		"max_deliver", c.cfg.MaxDeliver, "redeliver_in", delay.String(), "error", cause.Error())
	select {
	case <-ctx.Done(): // shutting down, or the connection is gone: hand it back now
	case <-time.After(delay):
	}
	c.stats.retried.Add(1)
	if err := c.Reject(d); err != nil {
		c.cfg.Logger.Warn("reject not sent; the broker requeues it with the connection", "error", err.Error())
	}
}

// quarantineLast keeps a message on its last delivery in the quarantine
// table, then acks it. While even that fails (Postgres down) it holds the
// message and retries; on shutdown it rejects it, and the broker's delivery
// limit dead-letters it to DeadLetterQueue if it comes back too often.
func (c *Consumer) quarantineLast(ctx context.Context, d *Delivery, cause error) {
	reason := fmt.Errorf("not recorded after %d deliveries (max deliver %d), queue %s: %w", d.Attempts.Delivery, c.cfg.MaxDeliver, c.cfg.Queue, cause)
	pause := time.Second
	for {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		id, err := c.quarantine(qctx, d.Body, store.ReasonMaxDeliver, reason.Error())
		cancel()
		if err == nil {
			c.stats.maxDelivered.Add(1)
			c.cfg.Logger.Warn("message quarantined after its last delivery", "quarantine_id", id, "queue", c.cfg.Queue)
			if err := c.Ack(d); err != nil {
				c.cfg.Logger.Warn("ack of a quarantined message not sent; its redelivery is quarantined again (counted as a copy)", "error", err.Error())
			}
			return
		}
		if ctx.Err() != nil {
			c.cfg.Logger.Error("message past max deliver not quarantined; rejected back to the queue", "error", err.Error())
			_ = c.Reject(d)
			return
		}
		c.cfg.Logger.Error("quarantine failed; holding the message and retrying", "error", err.Error(), "retry_in", pause.String())
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
}

// quarantine keeps raw under reason. A raw over message.MaxSize is kept as
// its first bytes, its size and its SHA-256, as the intake keeps one.
func (c *Consumer) quarantine(ctx context.Context, raw []byte, reason, detail string) (int64, error) {
	q := store.QuarantineEntry{Source: SourceRabbitMQ, Raw: raw, Reason: reason, Detail: detail}
	if len(raw) > message.MaxSize {
		sum := sha256.Sum256(raw)
		q.Raw, q.Size, q.SHA256 = raw[:message.OversizedPrefix], int64(len(raw)), hex.EncodeToString(sum[:])
	} else if m, err := c.in.Routes().Decode(raw); err == nil {
		q.Consumer, q.MessageID = m.Consumer, m.ID
	}
	return c.in.Store().Quarantine(ctx, q)
}
