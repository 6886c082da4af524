package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Defaults of the JetStream intake. internal/config applies them.
const (
	// DefaultStream is the stream messages are consumed from.
	DefaultStream = "EFFECTIVELY"
	// DefaultSubject is the subject filter of the consumer.
	DefaultSubject = "effectively.messages.>"
	// DefaultDurable is the durable consumer's name; every worker process
	// shares it, so the stream's messages are spread over them.
	DefaultDurable = "effectively-worker"
	// DefaultAckWait is how long the broker waits for the ack of a first
	// delivery before it redelivers.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxDeliver is how many deliveries a message gets before it is
	// quarantined as store.ReasonMaxDeliver.
	DefaultMaxDeliver = 5
	// DefaultDuplicateWindow is the publish deduplication window of a stream
	// the worker creates (JetStream's own default).
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultHandlers is how many deliveries a Consumer settles at once.
	// The inbox commits the handlers' inserts together (store.InsertInbox's
	// group commit), so they share two connections rather than holding one
	// each, and more of them keep both CPUs of a small machine busy where
	// 16 left a burst of copies waiting on round trips.
	DefaultHandlers = 64
	// DefaultStarters is how many workflow starts a Consumer has in flight
	// on its fast path.
	DefaultStarters = 32
	// SourceJetStream is the source recorded for messages from the broker.
	SourceJetStream = "jetstream"
)

// DefaultBackOff is the wait before the second, third, … delivery of a
// message that was not acked; the last entry repeats. Long on purpose: the
// only reason a valid message is not acked is an outage of Postgres, and a
// redelivery during the outage is wasted.
var DefaultBackOff = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// JetStreamConfig configures a Consumer. Zero values take the defaults noted
// per field.
type JetStreamConfig struct {
	// Stream is the stream to consume. Default DefaultStream.
	Stream string
	// Subject filters the stream's messages. Default DefaultSubject.
	Subject string
	// Durable names the durable pull consumer. Default DefaultDurable.
	Durable string
	// AckWait bounds the first delivery's processing: without an ack by
	// then, the broker redelivers. Default DefaultAckWait.
	AckWait time.Duration
	// MaxDeliver is the delivery after which an unrecorded message is
	// quarantined (store.ReasonMaxDeliver); finite, since it bounds the
	// redelivery window. Default DefaultMaxDeliver.
	MaxDeliver int
	// BackOff is the ack wait of the second, third, … delivery, the last
	// repeating. nil means DefaultBackOff; empty, AckWait for every
	// delivery.
	BackOff []time.Duration
	// MaxAckPending bounds the messages delivered and not yet acked.
	// Default 1000.
	MaxAckPending int
	// FetchBatch is how many messages the consumer keeps buffered from its
	// open pull requests (the iterator's PullMaxMessages). Default 100.
	FetchBatch int
	// Handlers is how many deliveries are recorded and acked at once; their
	// inbox inserts share transactions (store.InsertInbox). Default
	// DefaultHandlers.
	Handlers int
	// FetchWait is the expiry of each pull request the consumer keeps open
	// (at least 1s). Default 30s.
	FetchWait time.Duration
	// Starters bounds the workflow starts in flight right after the ack
	// (the fast path; the Dispatcher is the slow one). Default
	// DefaultStarters.
	Starters int
	// Logger receives a line per quarantined, failed and redelivered
	// message. Default slog.Default().
	Logger *slog.Logger
}

func (c JetStreamConfig) withDefaults() JetStreamConfig {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.BackOff == nil {
		c.BackOff = DefaultBackOff
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 1000
	}
	if c.FetchBatch <= 0 {
		c.FetchBatch = 100
	}
	if c.FetchWait <= 0 {
		c.FetchWait = 30 * time.Second
	}
	c.FetchWait = max(c.FetchWait, time.Second)
	if c.Handlers <= 0 {
		c.Handlers = DefaultHandlers
	}
	if c.Starters <= 0 {
		c.Starters = DefaultStarters
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a configuration the broker would refuse or that leaves
// the redelivery window unbounded.
func (c JetStreamConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(err error, fields ...string) { errs = append(errs, &FieldError{Fields: fields, Err: err}) }
	if c.AckWait <= 0 {
		bad(fmt.Errorf("ack wait %s must be positive", c.AckWait), "AckWait")
	}
	for i, b := range c.BackOff {
		if b <= 0 {
			bad(fmt.Errorf("backoff entry %d (%s) must be positive", i+1, b), "BackOff")
		}
	}
	if c.MaxDeliver <= 0 {
		bad(fmt.Errorf("max deliver %d: must be at least 1; unlimited redelivery has no horizon, so no retention would be safe", c.MaxDeliver), "MaxDeliver")
	} else if len(c.BackOff) > 0 && c.MaxDeliver <= len(c.BackOff)+1 {
		bad(fmt.Errorf("max deliver %d must exceed the %d ack waits (ack wait plus %d backoff entries)", c.MaxDeliver, len(c.BackOff)+1, len(c.BackOff)),
			"MaxDeliver", "AckWait", "BackOff")
	}
	if strings.ContainsAny(c.Stream, ". *>\t") {
		bad(fmt.Errorf("stream name %q must not contain '.', '*', '>' or spaces", c.Stream), "Stream")
	}
	if strings.ContainsAny(c.Durable, ". *>\t") {
		bad(fmt.Errorf("consumer name %q must not contain '.', '*', '>' or spaces", c.Durable), "Durable")
	}
	if err := validSubject(c.Subject, true); err != nil {
		bad(err, "Subject")
	}
	return errors.Join(errs...)
}

// FieldError is an error of JetStreamConfig.Validate about the fields it
// names, so that a caller can name its own settings for them.
type FieldError struct {
	Fields []string // JetStreamConfig's field names
	Err    error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// ackWaits is the broker's BackOff list: the ack wait of each delivery.
func (c JetStreamConfig) ackWaits() []time.Duration {
	if len(c.BackOff) == 0 {
		return nil
	}
	return append([]time.Duration{c.AckWait}, c.BackOff...)
}

// ackWaitOf is the ack wait of delivery n (1-based).
func (c JetStreamConfig) ackWaitOf(n uint64) time.Duration {
	waits := c.ackWaits()
	if len(waits) == 0 {
		return c.AckWait
	}
	last := len(waits) - 1
	if n > math.MaxInt || int(n) > last { // deliveries past the list keep its last wait
		return waits[last]
	}
	return waits[int(n)-1]
}

// ConsumerStats counts what a Consumer did since it was created.
type ConsumerStats struct {
	// Delivered counts deliveries, redeliveries included.
	Delivered int64
	// Recorded counts messages that created their inbox row.
	Recorded int64
	// Duplicates counts copies recognised by the inbox (redeliveries and
	// re-publishes).
	Duplicates int64
	// Invalid counts messages quarantined as store.ReasonInvalid.
	Invalid int64
	// PayloadMismatches counts messages quarantined as
	// store.ReasonPayloadMismatch: a seen ID with a different payload.
	PayloadMismatches int64
	// MaxDelivered counts messages quarantined as store.ReasonMaxDeliver.
	MaxDelivered int64
	// Naks counts deliveries that could not be recorded and were handed back
	// to the broker for a later redelivery.
	Naks int64
	// Started counts workflows started on the fast path, after the ack.
	Started int64
}

// Consumer consumes messages from a JetStream durable pull consumer into the
// inbox. For each delivery it records the message (inbox INSERT … ON
// CONFLICT, or quarantine), acknowledges it only once that has committed,
// and then starts its workflow on the fast path; what the fast path does not
// finish, a Dispatcher does.
//
// Deliveries are settled concurrently, up to JetStreamConfig.Handlers at a
// time, in no particular order: each one still goes through the steps above
// in that order. Copies of one message settled at the same moment are safe:
// the inbox keeps one row, counts the others as duplicates and lets one
// start through. Of two payloads under one ID, the one whose row commits
// first is kept and the other quarantined as a payload mismatch.
//
// A delivery that cannot be recorded (Postgres unreachable) is never acked:
// it is handed back with a delay, and after MaxDeliver deliveries it is
// quarantined with its raw bytes, so a message the inbox cannot take does not
// block the stream or vanish.
type Consumer struct {
	in    *Intake
	js    jetstream.JetStream
	cons  jetstream.Consumer
	cfg   JetStreamConfig
	stats struct {
		delivered, recorded, duplicates, invalid, mismatches, maxDelivered, naks, started atomic.Int64
	}
}

// NewConsumer creates or updates the durable consumer cfg describes on an
// existing stream and returns a Consumer that records into in. Nothing is
// fetched before Run.
func NewConsumer(ctx context.Context, in *Intake, js jetstream.JetStream, cfg JetStreamConfig) (*Consumer, error) {
	if in == nil || js == nil {
		return nil, errors.New("jetstream consumer: intake and jetstream are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("jetstream consumer: %w", err)
	}
	cfg = cfg.withDefaults()
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "effectively: order messages into the Postgres inbox",
		FilterSubject: cfg.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		BackOff:       cfg.ackWaits(),
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
	}
	return &Consumer{in: in, js: js, cons: cons, cfg: cfg}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	s := &c.stats
	return ConsumerStats{
		Delivered: s.delivered.Load(), Recorded: s.recorded.Load(), Duplicates: s.duplicates.Load(),
		Invalid: s.invalid.Load(), PayloadMismatches: s.mismatches.Load(), MaxDelivered: s.maxDelivered.Load(),
		Naks: s.naks.Load(), Started: s.started.Load(),
	}
}

// Redelivery reads the consumer's configuration as the broker holds it, and
// the stream's duplicate window: the inputs of the retention horizon.
func (c *Consumer) Redelivery(ctx context.Context) (retention.Redelivery, time.Duration, error) {
	ci, err := c.cons.Info(ctx)
	if err != nil {
		return retention.Redelivery{}, 0, fmt.Errorf("consumer %s info: %w", c.cfg.Durable, err)
	}
	st, err := c.js.Stream(ctx, c.cfg.Stream)
	if err != nil {
		return retention.Redelivery{}, 0, fmt.Errorf("stream %s: %w", c.cfg.Stream, err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		return retention.Redelivery{}, 0, fmt.Errorf("stream %s info: %w", c.cfg.Stream, err)
	}
	r := retention.Redelivery{AckWait: ci.Config.AckWait, MaxDeliver: ci.Config.MaxDeliver, BackOff: ci.Config.BackOff}
	return r, si.Config.Duplicates, nil
}

// Run fetches and records messages until ctx ends. Handler goroutines
// settle the fetched deliveries while the next ones are fetched; when all of
// them are busy, fetching waits. On shutdown it stops fetching, settles every
// message already fetched (record, ack or hand back), lets the workflow
// starts in flight finish and returns nil; queued starts are left pending for
// a Dispatcher.
func (c *Consumer) Run(ctx context.Context) error {
	// Room for every delivery the broker can have outstanding: a start
	// that finds no room is left to the Dispatcher, which waits MinAge.
	starts := make(chan fastStart, max(c.cfg.FetchBatch*2, c.cfg.MaxAckPending))
	var starters sync.WaitGroup
	for range c.cfg.Starters {
		starters.Go(func() {
			for s := range starts {
				if ctx.Err() != nil {
					continue // left pending: the next dispatcher pass starts it
				}
				c.startFast(ctx, s)
			}
		})
	}
	// Unbuffered: a delivery is handed over only to a free handler, so the
	// fetch loop holds at most one message that no handler has.
	deliveries := make(chan jetstream.Msg)
	var handlers sync.WaitGroup
	for range c.cfg.Handlers {
		handlers.Go(func() {
			for msg := range deliveries {
				c.handle(ctx, msg, starts)
			}
		})
	}
	defer func() {
		// Every fetched delivery has been handed to a handler. Let them
		// settle it; only then can no handler send on starts any more.
		close(deliveries)
		handlers.Wait()
		close(starts)
		starters.Wait()
	}()

	// A continuous pull: the iterator keeps a pull request open and asks
	// for more before its buffer runs dry, so a message never waits for
	// the next request. (Back-to-back Fetch calls leave gaps: a fetch whose
	// expiry notice does not arrive ends only a second after its expiry.)
	pause := time.Second
	for ctx.Err() == nil {
		iter, err := c.cons.Messages(jetstream.PullMaxMessages(c.cfg.FetchBatch), jetstream.PullExpiry(c.cfg.FetchWait))
		if err == nil {
			pause = time.Second // the broker answered: no backoff beyond a second
			err = c.consume(ctx, iter, deliveries)
		}
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			// Closed without a shutdown (the connection was closed): open
			// another, after the same pause as for an error.
			err = errors.New("the pull iterator closed")
		}
		c.cfg.Logger.Warn("pull from jetstream failed", "stream", c.cfg.Stream, "consumer", c.cfg.Durable, "error", err.Error(), "retry_in", pause.String())
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
	return nil
}

// consume hands the iterator's messages to the handlers until the iterator
// closes. When ctx ends the iterator is drained: no more pulls, and Next
// hands out what is already buffered before it reports the iterator closed,
// so a fetched message is settled, not left to its ack wait. Any other
// error (a missed heartbeat) drains the iterator too and is returned once
// the buffer is handed out.
func (c *Consumer) consume(ctx context.Context, iter jetstream.MessagesContext, deliveries chan<- jetstream.Msg) error {
	stop := context.AfterFunc(ctx, iter.Drain)
	defer stop()
	for {
		msg, err := iter.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			iter.Drain()
			// What was buffered is handed out before the error is returned.
			for {
				msg, err := iter.Next()
				if err != nil {
					break
				}
				deliveries <- msg
			}
			return err
		}
		deliveries <- msg
	}
}

// startFast starts the workflow of a message just acked, and marks its
// inbox row dispatched, without holding the row's lock across the start (a
// Dispatcher only takes rows older than its MinAge, and a start it makes
// anyway is refused as already started). A failure is only logged: the row
// stays pending and a Dispatcher pass starts it.
func (c *Consumer) startFast(ctx context.Context, s fastStart) {
	m := s.m
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The start continues the delivery's trace: Temporal's tracing
	// interceptor carries it into the workflow.
	sctx = trace.ContextWithSpanContext(sctx, s.span)
	started, err := c.in.Dispatch(sctx, m)
	if err != nil {
		c.cfg.Logger.Warn("start after ack failed; the dispatcher will retry", "message_id", m.ID, "error", err.Error())
		return
	}
	if started {
		c.stats.started.Add(1)
	}
}

// fastStart is a message to start on the fast path, with the span of the
// delivery that recorded it.
type fastStart struct {
	m    *message.Message
	span trace.SpanContext
}

// handle settles one delivery; up to Handlers calls run at once. It is
// called with the Run context, which may already be cancelled: a fetched
// message is settled anyway, within its ack wait.
//
// Each delivery is a span ("intake receive") that continues the
// publisher's trace when the message's headers carry a traceparent, and
// starts a trace otherwise; the workflow start and everything after it join
// that trace.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg, starts chan<- fastStart) {
	c.stats.delivered.Add(1)
	received := time.Now()
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to ack, nothing to record.
		c.cfg.Logger.Error("message without jetstream metadata", "subject", msg.Subject(), "error", err.Error())
		return
	}
	ackWait := c.cfg.ackWaitOf(md.NumDelivered)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(ackWait*3/4, time.Second))
	defer cancel()
	hctx = tracing.Propagator.Extract(hctx, tracing.HeaderCarrier(msg.Headers()))
	hctx, span := tracing.Tracer().Start(hctx, "intake receive", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.consumer.group.name", c.cfg.Durable),
			attribute.Int64("messaging.nats.delivery", int64(min(md.NumDelivered, math.MaxInt64))),
		))
	defer span.End()
	// Before its last delivery, a message of a type this worker does not
	// know goes back to the broker for a worker that does (a rolling
	// deploy); the last delivery quarantines it.
	record := c.in.RecordKnown
	if md.NumDelivered >= uint64(c.cfg.MaxDeliver) { //nolint:gosec // MaxDeliver is at least 1 (NewConsumer)
		record = c.in.Record
	}
	rec, err := record(hctx, msg.Data(), SourceJetStream)
	if err != nil {
		span.SetStatus(codes.Error, "not recorded")
		c.fail(ctx, msg, md, received, ackWait, err)
		return
	}
	span.SetAttributes(attribute.String("effectively.message_id", rec.MessageID),
		attribute.String("effectively.intake.status", string(rec.Status)), attribute.Bool("effectively.intake.new", rec.New))
	if rec.Reason != "" {
		span.SetAttributes(attribute.String("effectively.quarantine.reason", rec.Reason))
	}
	failpoint.Hit(failpoint.IntakeAfterInsert)
	switch {
	case rec.Status == StatusInvalid && rec.Reason == store.ReasonPayloadMismatch:
		c.stats.mismatches.Add(1)
	case rec.Status == StatusInvalid:
		c.stats.invalid.Add(1)
	case rec.New:
		c.stats.recorded.Add(1)
	default:
		c.stats.duplicates.Add(1)
		c.cfg.Logger.Info("redelivered or republished copy recognised", "message_id", rec.MessageID,
			"stream_seq", md.Sequence.Stream, "delivery", md.NumDelivered)
	}
	// A plain ack, not waiting for the broker's confirmation (DoubleAck
	// would cost a round trip per message): an ack lost on the way means
	// one more delivery, which the inbox recognises, nothing worse.
	if err := msg.Ack(); err != nil {
		c.cfg.Logger.Warn("ack not sent; the redelivery will be recognised", "message_id", rec.MessageID,
			"stream_seq", md.Sequence.Stream, "error", err.Error())
	}
	// The delivery that created the row starts the workflow, and so does a
	// redelivery of a row still pending (the delivery before it was not
	// acked: its process most likely died). Another copy of a pending row
	// does not: its first delivery is most likely being started right now,
	// by this or another process, and a start from the copy would cost a
	// Temporal call just to be refused. Were that start lost (a crash after
	// the ack), the Dispatcher starts the row.
	if rec.Pending && rec.Message != nil && (rec.New || md.NumDelivered > 1) {
		select {
		case starts <- fastStart{m: rec.Message, span: span.SpanContext()}:
		default: // starters busy: the dispatcher picks it up
		}
	}
}

// fail hands back a delivery that could not be recorded, or quarantines it
// when it was the last delivery the broker will make.
func (c *Consumer) fail(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, received time.Time, ackWait time.Duration, cause error) {
	// MaxDeliver is at least 1 (NewConsumer validates it).
	if c.cfg.MaxDeliver > 0 && md.NumDelivered >= uint64(c.cfg.MaxDeliver) {
		c.quarantineLast(ctx, msg, md, cause)
		return
	}
	// Redeliver when the ack wait would have run out anyway: the redelivery
	// window stays what the consumer configuration says.
	delay := max(ackWait-time.Since(received), 0)
	c.stats.naks.Add(1)
	c.cfg.Logger.Warn("message not recorded; the broker will redeliver it", "stream_seq", md.Sequence.Stream,
		"delivery", md.NumDelivered, "max_deliver", c.cfg.MaxDeliver, "redeliver_in", delay.String(), "error", cause.Error())
	if err := msg.NakWithDelay(delay); err != nil {
		c.cfg.Logger.Warn("nak failed; the ack wait will redeliver it", "stream_seq", md.Sequence.Stream, "error", err.Error())
	}
}

// quarantineLast keeps a message on its last delivery in the quarantine
// table and terminates it. If even the quarantine fails (Postgres down),
// it keeps the message in progress and tries again until ctx ends: the
// broker will not deliver it again, so giving up would lose it.
func (c *Consumer) quarantineLast(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	reason := fmt.Errorf("not recorded after %d deliveries (max deliver %d), stream %s sequence %d: %w",
		md.NumDelivered, c.cfg.MaxDeliver, md.Stream, md.Sequence.Stream, cause)
	pause := time.Second
	for {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, err := c.in.reject(qctx, msg.Data(), SourceJetStream, "", "", store.ReasonMaxDeliver, reason)
		cancel()
		if err == nil {
			c.stats.maxDelivered.Add(1)
			if err := msg.Term(); err != nil {
				c.cfg.Logger.Warn("term failed", "stream_seq", md.Sequence.Stream, "error", err.Error())
			}
			c.cfg.Logger.Warn("message quarantined after its last delivery", "message_id", res.MessageID,
				"quarantine_id", res.QuarantineID, "stream_seq", md.Sequence.Stream)
			return
		}
		if ctx.Err() != nil {
			c.cfg.Logger.Error("message past max deliver could not be quarantined before shutdown; it stays in the stream but will not be delivered again",
				"stream", md.Stream, "stream_seq", md.Sequence.Stream, "error", err.Error())
			return
		}
		c.cfg.Logger.Error("quarantine failed; holding the message and retrying", "stream_seq", md.Sequence.Stream, "error", err.Error(), "retry_in", pause.String())
		_ = msg.InProgress()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
}

// StreamHeaderAllowance is the room a stream the worker creates leaves for
// a message's NATS headers (Nats-Msg-Id, Nats-Expected-Stream, traceparent,
// tracestate) on top of message.MaxSize: the server counts headers and
// payload together against a stream's MaxMsgSize.
const StreamHeaderAllowance = 4 << 10

// MaxStreamMsgSize is the MaxMsgSize of the streams the worker creates:
// the intake's message limit (message.MaxSize) plus the header allowance.
// The broker then refuses a larger publish outright, so that neither the
// stream nor the consumer ever holds a message the intake would only
// quarantine as too_large.
const MaxStreamMsgSize = message.MaxSize + StreamHeaderAllowance

// StreamSpec describes a stream EnsureStream creates when it is missing.
type StreamSpec struct {
	// Name of the stream.
	Name string
	// Subjects the stream captures.
	Subjects []string
	// Duplicates is the publish deduplication window (Nats-Msg-Id).
	// Default DefaultDuplicateWindow.
	Duplicates time.Duration
	// MaxAge drops messages older than this; 0 keeps them. The worker sets
	// it to the retention, so that a replay of the stream (a new consumer,
	// or a reset one) never meets a message whose record was pruned.
	MaxAge time.Duration
	// MaxMsgSize is the largest message (headers and payload) the stream
	// stores. Default MaxStreamMsgSize; -1: none of its own (the server's
	// max_payload still applies).
	MaxMsgSize int32
}

// EnsureStream returns the stream spec.Name, creating it from spec when it
// does not exist. An existing stream is left as it is: streams are often
// owned by whoever runs the broker.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (s jetstream.Stream, created bool, err error) {
	s, err = js.Stream(ctx, spec.Name)
	if err == nil {
		return s, false, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, false, fmt.Errorf("stream %s: %w", spec.Name, err)
	}
	if spec.Duplicates <= 0 {
		spec.Duplicates = DefaultDuplicateWindow
	}
	if spec.MaxMsgSize == 0 {
		spec.MaxMsgSize = MaxStreamMsgSize
	}
	s, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       spec.Name,
		Subjects:   spec.Subjects,
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Duplicates: spec.Duplicates,
		MaxAge:     spec.MaxAge,
		MaxMsgSize: spec.MaxMsgSize,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Another worker created it a moment ago.
		s, err = js.Stream(ctx, spec.Name)
		return s, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("create stream %s: %w", spec.Name, err)
	}
	return s, true, nil
}

// EnsureStreams ensures each stream of specs (EnsureStream) and logs what it
// found: a created stream at info; an existing one, which is the broker
// owner's and never changed, at warn when it keeps messages longer than
// spec.MaxAge (a replay through a new consumer would then run messages whose
// records were pruned) or stores messages larger than MaxStreamMsgSize.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, logger *slog.Logger, specs ...StreamSpec) error {
	for _, spec := range specs {
		s, created, err := EnsureStream(ctx, js, spec)
		if err != nil {
			return err
		}
		if created {
			logger.Info("created stream", "stream", spec.Name, "subjects", spec.Subjects, "max_age", spec.MaxAge.String(),
				"max_msg_size", MaxStreamMsgSize)
			continue
		}
		info, err := s.Info(ctx)
		if err != nil {
			continue
		}
		if info.Config.MaxAge == 0 || info.Config.MaxAge > spec.MaxAge {
			logger.Warn("stream keeps messages longer than the retention: replaying it through a new consumer would run messages whose records were pruned",
				"stream", spec.Name, "max_age", info.Config.MaxAge.String(), "retention", spec.MaxAge.String())
		}
		if LooseMessageLimit(info.Config) {
			logger.Warn("stream stores messages larger than the intake accepts: an oversized one is delivered and quarantined as too_large (size, SHA-256, first 1 KiB) instead of being refused by the broker; set the stream's max_msg_size",
				"stream", spec.Name, "max_msg_size", info.Config.MaxMsgSize, "limit", MaxStreamMsgSize)
		}
	}
	return nil
}

// LooseMessageLimit reports whether a stream configured as c stores
// messages larger than MaxStreamMsgSize, or has no size limit of its own.
// EnsureStream leaves such an existing stream as it is (it is the broker
// owner's); the worker warns about it, since an oversized message then
// reaches the consumer, which quarantines it as too_large by its size,
// digest and first bytes.
func LooseMessageLimit(c jetstream.StreamConfig) bool {
	return c.MaxMsgSize <= 0 || c.MaxMsgSize > MaxStreamMsgSize
}

// PublishSubject returns the subject a message of type typ is published on
// under the consumer's subject filter: "effectively.messages.>" and
// "order.placed" give "effectively.messages.order.placed"; a filter without
// wildcards is itself the subject.
func PublishSubject(filter, typ string) (string, error) {
	if err := validSubject(filter, true); err != nil {
		return "", err
	}
	if !strings.ContainsAny(filter, "*>") {
		return filter, nil
	}
	prefix, ok := strings.CutSuffix(filter, ".>")
	if !ok || strings.Contains(prefix, "*") {
		return "", fmt.Errorf("subject filter %q: only a filter ending in .> (or none) names a subject to publish on", filter)
	}
	if typ == "" {
		typ = "unknown"
	}
	subject := prefix + "." + typ
	if err := validSubject(subject, false); err != nil {
		return "", fmt.Errorf("message type %q: %w", typ, err)
	}
	return subject, nil
}

// MsgID is the Nats-Msg-Id a message is published with: its ID and a short
// hash of its canonical content. The broker then drops an identical copy
// published within the duplicate window, but lets a different payload under
// the same ID through, so the inbox can quarantine it as a payload mismatch
// instead of the broker silently dropping it.
func MsgID(m *message.Message) string {
	return m.ID + "#" + m.Hash()[:16]
}

// validSubject checks a NATS subject (or, with wildcards, a filter).
func validSubject(s string, wildcards bool) error {
	if s == "" {
		return errors.New("subject is empty")
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token", s)
		case strings.ContainsAny(t, " \t\r\n"):
			return fmt.Errorf("subject %q contains white space", s)
		case (t == "*" || t == ">") && !wildcards:
			return fmt.Errorf("subject %q contains a wildcard", s)
		case t == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q: '>' must be the last token", s)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject %q: wildcards must be whole tokens", s)
		}
	}
	return nil
}
