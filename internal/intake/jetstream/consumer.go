// Package jetstream is the NATS JetStream source: a durable pull consumer
// whose deliveries go through the intake's Path, the streams the worker
// creates, and the publish helpers (subject, Nats-Msg-Id).
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/retention"
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
	// DefaultName is the source name of a JetStream source: the source of
	// its inbox and quarantine rows, its metrics label and health check.
	DefaultName = "jetstream"
	// DefaultHandlers is how many deliveries a Consumer settles at once.
	// The inbox commits the handlers' inserts together (store.InsertInbox's
	// group commit), so they share two connections rather than holding one
	// each, and more of them keep both CPUs of a small machine busy where
	// 16 left a burst of copies waiting on round trips.
	DefaultHandlers = 64
	// DefaultStarters is how many workflow starts a Consumer has in flight
	// on its fast path.
	DefaultStarters = intake.DefaultStarters
)

// DefaultBackOff is the wait before the second, third, … delivery of a
// message that was not acked; the last entry repeats. Long on purpose: the
// only reason a valid message is not acked is an outage of Postgres, and a
// redelivery during the outage is wasted.
var DefaultBackOff = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// Config configures a Consumer. Zero values take the defaults noted
// per field.
type Config struct {
	// Name is the source's name (intake.Source.Name). Default DefaultName.
	Name string
	// Stream is the stream to consume. Default DefaultStream.
	Stream string
	// Subject filters the stream's messages. Default DefaultSubject.
	Subject string
	// Durable names the durable pull consumer. Default DefaultDurable.
	Durable string
	// Skip lists subjects that another consumer of this worker records
	// (a route's own, NATS_CONSUMER_PER_ROUTE): their deliveries are acked
	// here without being recorded, while a route durable for the subject
	// (named Durable-<route>) exists with a worker pulling from it; else
	// they are recorded here too.
	Skip []string
	// StartAfter names a durable consumer of the stream whose acked
	// messages a new durable skips: created, it starts after that one's
	// ack floor instead of at the stream's first message (a route's
	// consumer taking over from the consumer of every subject). An
	// existing durable keeps its position.
	StartAfter string
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
	// DeadLetters is the stream that captures the durable's max-delivery
	// advisories, created when missing: a last delivery no worker settled
	// (a worker killed holding it, a pull lost with it) is read from there
	// and recorded or quarantined, not left in the stream unrecorded.
	// Default DeadLetterStream(Stream); DeadLettersOff captures none.
	DeadLetters string
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
	// OneRoute says Subject carries one route's messages only (a consumer
	// per route): a delivery waits, kept in progress, while the route's
	// lane of the fast path is full, and the route's backlog stays in the
	// stream (intake.PathConfig.OneRoute). The pull then buffers at most
	// Handlers messages, so that none waits unseen past its ack wait.
	OneRoute bool
	// Logger receives a line per quarantined, failed and redelivered
	// message. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts the settlements under Name. Nil counts nothing.
	Metrics *metrics.Metrics
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.DeadLetters == "" {
		c.DeadLetters = DeadLetterStream(c.Stream)
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
	if c.OneRoute {
		c.FetchBatch = min(c.FetchBatch, c.Handlers)
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
func (c Config) Validate() error {
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
	if strings.ContainsAny(c.DeadLetters, ". *>\t") {
		bad(fmt.Errorf("dead-letter stream name %q must not contain '.', '*', '>' or spaces", c.DeadLetters), "DeadLetters")
	}
	if strings.ContainsAny(c.Durable, ". *>\t") {
		bad(fmt.Errorf("consumer name %q must not contain '.', '*', '>' or spaces", c.Durable), "Durable")
	}
	if err := validSubject(c.Subject, true); err != nil {
		bad(err, "Subject")
	}
	for _, sk := range c.Skip {
		if err := validSubject(sk, false); err != nil {
			bad(err, "Skip")
		}
	}
	if strings.ContainsAny(c.StartAfter, ". *>\t") {
		bad(fmt.Errorf("consumer name %q must not contain '.', '*', '>' or spaces", c.StartAfter), "StartAfter")
	}
	return errors.Join(errs...)
}

// FieldError is an error of Config.Validate about the fields it
// names, so that a caller can name its own settings for them.
type FieldError struct {
	Fields []string // Config's field names
	Err    error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// ackWaits is the broker's BackOff list: the ack wait of each delivery.
func (c Config) ackWaits() []time.Duration {
	if len(c.BackOff) == 0 {
		return nil
	}
	return append([]time.Duration{c.AckWait}, c.BackOff...)
}

// ackWaitOf is the ack wait of delivery n (1-based).
func (c Config) ackWaitOf(n uint64) time.Duration {
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

// Consumer is a JetStream source: it consumes a durable pull consumer into
// the inbox through its intake.Path. For each delivery the Path records the
// message (inbox INSERT … ON CONFLICT, or quarantine); the Consumer acks it
// only once that has committed, and the Path then starts its workflow on the
// fast path; what the fast path does not finish, a Dispatcher does.
//
// Deliveries are settled concurrently, up to Config.Handlers at a time, in
// no particular order: each one still goes through the steps above in that
// order. Copies of one message settled at the same moment are safe: the
// inbox keeps one row, counts the others as duplicates and lets one start
// through. Of two payloads under one ID, the one whose row commits first is
// kept and the other quarantined as a payload mismatch.
//
// A delivery that cannot be recorded (Postgres unreachable) is never acked:
// it is handed back with a delay (a nak when its ack wait would have run
// out); its MaxDeliver-th delivery is held and recorded once Postgres
// takes it, else quarantined with its raw bytes and terminated, so a message
// the inbox cannot take does not block the stream or vanish. A last delivery
// no worker settled (a kill, a lost pull) comes back from the broker's
// max-delivery advisory (Config.DeadLetters) and is settled the same way.
type Consumer struct {
	path *intake.Path
	js   natsjs.JetStream
	cfg  Config

	dead natsjs.Consumer // its max-delivery advisories (Config.DeadLetters); nil when off

	mu   sync.Mutex
	cons natsjs.Consumer // replaced when a route's durable is created again (Run)

	skip skipView // the route durables its Skip leaves their subjects to
}

var _ intake.Source = (*Consumer)(nil)

// NewConsumer creates or updates the durable consumer cfg describes on an
// existing stream and returns a Consumer that records into in. Nothing is
// fetched before Run.
func NewConsumer(ctx context.Context, in *intake.Intake, js natsjs.JetStream, cfg Config) (*Consumer, error) {
	cfg, path, err := newPath(in, js, cfg, "jetstream consumer")
	if err != nil {
		return nil, err
	}
	cons, err := createDurable(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	dead, err := EnsureDeadLetters(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	return &Consumer{path: path, js: js, cons: cons, dead: dead, cfg: cfg}, nil
}

// newPath checks cfg, fills in its defaults and makes the Path its
// deliveries go through; what names the caller in its errors.
func newPath(in *intake.Intake, js natsjs.JetStream, cfg Config, what string) (Config, *intake.Path, error) {
	if in == nil || js == nil {
		return cfg, nil, fmt.Errorf("%s: intake and jetstream are required", what)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", what, err)
	}
	cfg = cfg.withDefaults()
	path, err := intake.NewPath(in, intake.PathConfig{
		Source: cfg.Name, Starters: cfg.Starters, Metrics: cfg.Metrics, Logger: cfg.Logger, OneRoute: cfg.OneRoute,
		DeadLetterRecordAge: deadLetterRecordAge,
		// Room for every delivery the broker can have outstanding: a start
		// that finds no room is left to the Dispatcher, which waits MinAge.
		StartQueue: max(cfg.FetchBatch*2, cfg.MaxAckPending),
	})
	if err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", what, err)
	}
	return cfg, path, nil
}

// durable is the durable consumer's handle.
func (c *Consumer) durable() natsjs.Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cons
}

// createDurable creates or updates the durable cfg describes.
func createDurable(ctx context.Context, js natsjs.JetStream, cfg Config) (natsjs.Consumer, error) {
	// Workers that start together may each find the durable missing and
	// create it from different starts; the broker refuses to change a start,
	// so one that lost the race takes the durable's own start and updates.
	for attempt := 1; ; attempt++ {
		deliver, startSeq, err := startOf(ctx, js, cfg)
		if err != nil {
			return nil, err
		}
		beforeCreate()
		cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, natsjs.ConsumerConfig{
			Durable:       cfg.Durable,
			Description:   consumerDescription,
			FilterSubject: cfg.Subject,
			AckPolicy:     natsjs.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxDeliver:    cfg.MaxDeliver,
			BackOff:       cfg.ackWaits(),
			MaxAckPending: cfg.MaxAckPending,
			DeliverPolicy: deliver,
			OptStartSeq:   startSeq,
		})
		if err == nil {
			return cons, nil
		}
		if _, lerr := js.Consumer(ctx, cfg.Stream, cfg.Durable); attempt >= 3 || lerr != nil {
			return nil, fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
		}
	}
}

// beforeCreate runs between reading a durable's start and creating it: a
// test's way in to create it meanwhile, as another worker would.
var beforeCreate = func() {}

// startOf is where cfg's durable starts: where it is for one that exists
// (the broker refuses to change it), after cfg.StartAfter's ack floor for a
// new one when that durable exists, else at the stream's first message.
func startOf(ctx context.Context, js natsjs.JetStream, cfg Config) (natsjs.DeliverPolicy, uint64, error) {
	cur, err := js.Consumer(ctx, cfg.Stream, cfg.Durable)
	switch {
	case err == nil:
		ci := cur.CachedInfo()
		return ci.Config.DeliverPolicy, ci.Config.OptStartSeq, nil
	case !errors.Is(err, natsjs.ErrConsumerNotFound):
		return 0, 0, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
	case cfg.StartAfter == "":
		return natsjs.DeliverAllPolicy, 0, nil
	}
	prev, err := js.Consumer(ctx, cfg.Stream, cfg.StartAfter)
	if errors.Is(err, natsjs.ErrConsumerNotFound) {
		return natsjs.DeliverAllPolicy, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("consumer %s on stream %s: %w", cfg.StartAfter, cfg.Stream, err)
	}
	return natsjs.DeliverByStartSequencePolicy, prev.CachedInfo().AckFloor.Stream + 1, nil
}

// Name is the source's name (Config.Name).
func (c *Consumer) Name() string { return c.cfg.Name }

// Subject is the consumer's subject filter (Config.Subject).
func (c *Consumer) Subject() string { return c.cfg.Subject }

// Stats returns the consumer's counters.
func (c *Consumer) Stats() intake.SourceStats { return c.path.Stats() }

// Check is ready when the broker answers for the durable consumer.
func (c *Consumer) Check() health.Check {
	return health.Check{Name: "source." + c.cfg.Name, Fn: func(ctx context.Context) error {
		if _, err := c.durable().Info(ctx); err != nil {
			return fmt.Errorf("jetstream consumer %s on stream %s: %w", c.cfg.Durable, c.cfg.Stream, err)
		}
		return nil
	}}
}

// Redelivery reads the consumer's configuration as the broker holds it, and
// the stream's duplicate window: the inputs of the retention horizon.
func (c *Consumer) Redelivery(ctx context.Context) (retention.Redelivery, time.Duration, error) {
	ci, err := c.durable().Info(ctx)
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

// Horizon is the consumer's redelivery window as the broker holds it (the
// ack waits of MaxDeliver deliveries) plus the stream's duplicate window.
// A consumer without MaxDeliver has none.
func (c *Consumer) Horizon(ctx context.Context) (retention.SourceHorizon, error) {
	r, dup, err := c.Redelivery(ctx)
	if err != nil {
		return retention.SourceHorizon{}, err
	}
	h, err := retention.JetStreamHorizon(c.cfg.Name, r, dup)
	if err != nil {
		return retention.SourceHorizon{}, err
	}
	h.Basis = fmt.Sprintf("consumer %s on stream %s: %s", c.cfg.Durable, c.cfg.Stream, h.Basis)
	return h, nil
}

// Run fetches and records messages until ctx ends. Handler goroutines
// settle the fetched deliveries while the next ones are fetched; when all of
// them are busy, fetching waits. On shutdown it stops fetching, settles every
// message already fetched (record, ack or hand back), lets the workflow
// starts in flight finish and returns nil; queued starts are left pending for
// a Dispatcher.
func (c *Consumer) Run(ctx context.Context) error {
	c.path.Open(ctx)
	// Unbuffered: a delivery is handed over only to a free handler, so the
	// fetch loop holds at most one message that no handler has.
	deliveries := make(chan natsjs.Msg)
	var handlers sync.WaitGroup
	for range c.cfg.Handlers {
		handlers.Go(func() {
			for msg := range deliveries {
				c.handle(ctx, msg)
			}
		})
	}
	var dead sync.WaitGroup
	if c.dead != nil {
		dead.Go(func() { c.runDeadLetters(ctx, c.dead) })
	}
	defer func() {
		// Every fetched delivery has been handed to a handler. Let them
		// settle it; only then can no handler queue a start any more.
		close(deliveries)
		handlers.Wait()
		dead.Wait()
		c.path.Close()
	}()

	// A continuous pull: the iterator keeps a pull request open and asks
	// for more before its buffer runs dry, so a message never waits for
	// the next request. (Back-to-back Fetch calls leave gaps: a fetch whose
	// expiry notice does not arrive ends only a second after its expiry.)
	pause := time.Second
	for ctx.Err() == nil {
		iter, err := c.durable().Messages(natsjs.PullMaxMessages(c.cfg.FetchBatch), natsjs.PullExpiry(c.cfg.FetchWait))
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
		c.recreate(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
	return nil
}

// recreate creates a route's durable again when it is gone: a worker
// without NATS_CONSUMER_PER_ROUTE deleted it (Retiring) just as this one
// started with the setting on. Meanwhile the shared consumer, which skips
// the route's messages only while the durable is in use, records them
// itself; created again, it starts after the shared consumer's ack floor.
func (c *Consumer) recreate(ctx context.Context) {
	if c.cfg.StartAfter == "" {
		return
	}
	if _, err := c.js.Consumer(ctx, c.cfg.Stream, c.cfg.Durable); !errors.Is(err, natsjs.ErrConsumerNotFound) {
		return
	}
	cons, err := createDurable(ctx, c.js, c.cfg)
	if err != nil {
		c.cfg.Logger.Error("a route's consumer is gone and creating it again failed", "stream", c.cfg.Stream, "consumer", c.cfg.Durable, "error", err.Error())
		return
	}
	c.mu.Lock()
	c.cons = cons
	c.mu.Unlock()
	c.cfg.Logger.Error("a route's consumer was deleted while this worker ran with NATS_CONSUMER_PER_ROUTE (a worker without it retired it); created it again after the shared consumer's ack floor (the shared consumer records the route's messages itself while the durable is not in use); run every worker with the same setting",
		"stream", c.cfg.Stream, "consumer", c.cfg.Durable)
}

// consume hands the iterator's messages to the handlers until the iterator
// closes. When ctx ends the iterator is drained: no more pulls, and Next
// hands out what is already buffered before it reports the iterator closed,
// so a fetched message is settled, not left to its ack wait. Any other
// error (a missed heartbeat) drains the iterator too and is returned once
// the buffer is handed out.
func (c *Consumer) consume(ctx context.Context, iter natsjs.MessagesContext, deliveries chan<- natsjs.Msg) error {
	stop := context.AfterFunc(ctx, iter.Drain)
	defer stop()
	for {
		msg, err := iter.Next()
		if errors.Is(err, natsjs.ErrMsgIteratorClosed) {
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

// handle turns one JetStream delivery into an intake.Delivery and lets the
// Path settle it; up to Handlers calls run at once. It is called with the
// Run context, which may already be cancelled: a fetched message is settled
// anyway, within its ack wait.
func (c *Consumer) handle(ctx context.Context, msg natsjs.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to ack, nothing to record.
		c.cfg.Logger.Error("message without jetstream metadata", "subject", msg.Subject(), "error", err.Error())
		return
	}
	if c.skips(ctx, msg.Subject()) {
		// A route's own consumer records it.
		if err := msg.Ack(); err != nil {
			c.cfg.Logger.Warn("ack of a message another consumer records failed; it comes again", "subject", msg.Subject(),
				"position", fmt.Sprintf("stream %s seq %d", md.Stream, md.Sequence.Stream), "error", err.Error())
		}
		return
	}
	c.path.Handle(ctx, c.delivery(msg, md))
}

// delivery is msg in the Path's terms, settled by Settle below.
func (c *Consumer) delivery(msg natsjs.Msg, md *natsjs.MsgMetadata) intake.Delivery {
	return intake.Delivery{
		Raw:      msg.Data(),
		Source:   c.cfg.Name,
		Attempt:  int(min(md.NumDelivered, math.MaxInt32)),
		Last:     md.NumDelivered >= uint64(c.cfg.MaxDeliver), //nolint:gosec // MaxDeliver is at least 1 (NewConsumer)
		Headers:  tracing.HeaderCarrier(msg.Headers()),
		Received: time.Now(),
		AckWait:  c.cfg.ackWaitOf(md.NumDelivered),
		Position: fmt.Sprintf("stream %s seq %d", md.Stream, md.Sequence.Stream),
		Attributes: []attribute.KeyValue{
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.consumer.group.name", c.cfg.Durable),
			attribute.Int64("messaging.nats.delivery", int64(min(md.NumDelivered, math.MaxInt64))),
		},
		Settle:    func(_ context.Context, v intake.Verdict) error { return settle(msg, v) },
		KeepAlive: func() { _ = msg.InProgress() },
	}
}

// settle carries out v on msg. A plain ack, not waiting for the broker's
// confirmation (DoubleAck would cost a round trip per message): an ack lost
// on the way means one more delivery, which the inbox recognises, nothing
// worse. A message quarantined after its last delivery is terminated; one
// quarantined by its content (invalid, too large, payload mismatch) acked.
func settle(msg natsjs.Msg, v intake.Verdict) error {
	switch v.Settle {
	case intake.SettleRetry:
		return msg.NakWithDelay(v.Delay)
	case intake.SettleQuarantined:
		if v.Result.Reason == store.ReasonMaxDeliver {
			return msg.Term()
		}
		return msg.Ack()
	case intake.SettleAck:
		return msg.Ack()
	}
	return fmt.Errorf("unknown settlement %q", v.Settle)
}
