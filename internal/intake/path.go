package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Defaults of a Path.
const (
	// DefaultStarters is how many workflow starts a Path has in flight on
	// its fast path.
	DefaultStarters = 32
	// DefaultHandleTimeout bounds the handling of a delivery from a broker
	// that does not redeliver on a timer (Delivery.AckWait 0).
	DefaultHandleTimeout = 30 * time.Second
	// DefaultStartQueue is how many recorded messages of one consumer wait
	// for a starter before its next one is left to the Dispatcher.
	DefaultStartQueue = 1000
)

// PathConfig configures a Path. Zero values take the defaults noted per
// field.
type PathConfig struct {
	// Source is the source's name (Source.Name): the source label of the
	// metrics, and the source of the rows it writes. Required.
	Source string
	// Starters bounds the workflow starts in flight right after the settle
	// (the fast path; the Dispatcher is the slow one). Default
	// DefaultStarters.
	Starters int
	// StartQueue is how many recorded messages of one consumer may wait
	// for a starter; one that finds no room is left to the Dispatcher. The
	// consumers' queues are served in turn. Default DefaultStartQueue.
	StartQueue int
	// RetryBackoff is the delay of a retry from a broker without an ack
	// wait, by attempt (1-based, the last entry repeating). Default
	// DefaultRetryBackoff.
	RetryBackoff []time.Duration
	// OneRoute says the source carries one route's messages only (a
	// JetStream consumer per route): a delivery of a route whose lane of
	// the fast path is full (recorded and waiting for their start, its hold
	// or its pace: 2 × the starters the route may use) waits before its
	// inbox insert, kept alive (Delivery.KeepAlive), for at most half its
	// ack wait, and the rest of the route's backlog stays in the broker.
	// A backlog that comes at once then enters Postgres at the route's
	// start pace, not all in the same instant, when every other route's
	// messages would wait for the machine. Only a source whose deliveries
	// have a KeepAlive, or no ack wait, is held. A source carrying several
	// routes must not set it: one route's wait would hold the others'
	// deliveries behind it.
	OneRoute bool
	// DeadLetterRecordAge bounds the age of a dead letter DeadLetter still
	// records like a last delivery. Default DeadLetterRecordAge.
	DeadLetterRecordAge time.Duration
	// Metrics counts the settlements by source. Nil counts nothing.
	Metrics *metrics.Metrics
	// Logger receives a line per quarantined, retried and redelivered
	// message. Default slog.Default().
	Logger *slog.Logger
}

// DefaultRetryBackoff is the wait before a broker without an ack wait
// (Kafka, RabbitMQ) gets a delivery that could not be recorded again.
var DefaultRetryBackoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}

// Path is the broker-neutral way of a delivery: decode → inbox (the group
// commit) → verdict → settle → fast-path start. Every source has one; it
// owns the source's counters and its starters.
//
// A delivery whose message cannot be recorded (Postgres unreachable) is
// never acked: it is handed back. Its last delivery is held, the broker
// kept waiting, and the record tried again until it commits, or until the
// quarantine takes the message with its raw bytes instead (max_deliver: the
// inbox refused it while Postgres answered), so a message the inbox cannot
// take never blocks the source for good nor vanishes. Before its last delivery, a
// message of a type this worker does not know is handed back for a worker
// that knows it (a rolling deploy that adds a type).
type Path struct {
	in     *Intake
	cfg    PathConfig
	mu     sync.Mutex // guards starts against Close
	starts *lanes
	ahead  int // the deliveries its lane takes before the next waits (PathConfig.OneRoute)
	wg     sync.WaitGroup
	stats  struct {
		delivered, recorded, duplicates, invalid, mismatches, maxDelivered, retries, started, waited atomic.Int64
	}
}

// NewPath returns the Path of source cfg.Source recording into in.
func NewPath(in *Intake, cfg PathConfig) (*Path, error) {
	if in == nil {
		return nil, errors.New("intake path: intake is required")
	}
	if cfg.Source == "" {
		return nil, errors.New("intake path: the source name is required")
	}
	if cfg.Starters <= 0 {
		cfg.Starters = DefaultStarters
	}
	if cfg.StartQueue <= 0 {
		cfg.StartQueue = DefaultStartQueue
	}
	if len(cfg.RetryBackoff) == 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.DeadLetterRecordAge <= 0 {
		cfg.DeadLetterRecordAge = DeadLetterRecordAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Path{in: in, cfg: cfg}, nil
}

// Source returns the source name the Path records under.
func (p *Path) Source() string { return p.cfg.Source }

// Intake returns the Intake the Path records into.
func (p *Path) Intake() *Intake { return p.in }

// Open starts the fast-path starters; they start workflows with ctx until
// Close. Handle before Open (or after Close) leaves every start to the
// Dispatcher.
func (p *Path) Open(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starts != nil {
		return
	}
	// A paced route has at most a quarter of the starters, so that the
	// ones waiting for its pace leave the rest to the other routes.
	perRoute := 0
	if p.in.cfg.StartRate > 0 {
		perRoute = max(1, p.cfg.Starters/4)
	}
	starts := newLanes(p.cfg.StartQueue, perRoute, p.in.held)
	p.starts = starts
	// What a route's lane takes before its deliveries wait (OneRoute): 2 ×
	// the starters it may use.
	p.ahead = 2 * p.cfg.Starters
	if perRoute > 0 {
		p.ahead = 2 * perRoute
	}
	for range p.cfg.Starters {
		p.wg.Go(func() {
			for {
				s, ok := starts.pop()
				if !ok {
					return
				}
				// Its route's pace (Config.StartRate): the lanes fill
				// meanwhile, then the Dispatcher takes what is past them.
				// An error leaves it pending for the next dispatcher pass.
				if p.in.awaitStart(ctx, s.m.Consumer) == nil {
					p.startFast(ctx, s)
				}
				starts.done(s.m.Consumer)
			}
		})
	}
}

// Close lets the starts in flight finish and returns; queued starts whose
// context ended are left pending for a Dispatcher. Call it once every
// Handle has returned.
func (p *Path) Close() {
	p.mu.Lock()
	starts := p.starts
	p.starts = nil
	p.mu.Unlock()
	if starts != nil {
		starts.close()
		p.wg.Wait()
	}
}

// Stats returns the Path's counters.
func (p *Path) Stats() SourceStats {
	s := &p.stats
	return SourceStats{
		Delivered: s.delivered.Load(), Recorded: s.recorded.Load(), Duplicates: s.duplicates.Load(),
		Invalid: s.invalid.Load(), PayloadMismatches: s.mismatches.Load(), MaxDelivered: s.maxDelivered.Load(),
		Retries: s.retries.Load(), Started: s.started.Load(), Waited: s.waited.Load(),
	}
}

// Handle records one delivery, settles it (d.Settle) as the verdict says,
// then queues its workflow's start, and returns the verdict. It may be
// called with a cancelled ctx (a source settling what it fetched before a
// shutdown): the delivery is handled anyway, within its ack wait.
//
// Each delivery is a span ("intake receive") that continues the
// publisher's trace when d.Headers carry a traceparent; the workflow start
// and everything after it join that trace.
func (p *Path) Handle(ctx context.Context, d Delivery) Verdict {
	p.stats.delivered.Add(1)
	if d.Received.IsZero() {
		d.Received = time.Now()
	}
	var pre *message.Message // decoded before the wait for room (PathConfig.OneRoute)
	if p.cfg.OneRoute && (d.KeepAlive != nil || d.AckWait == 0) {
		if m, err := p.in.cfg.Routes.Decode(d.Raw); err == nil {
			pre = m
			defer p.admit(ctx, &d, m.Consumer)()
		}
	}
	timeout := DefaultHandleTimeout
	if d.AckWait > 0 {
		timeout = max(d.AckWait*3/4, time.Second)
	}
	until := time.Now().Add(timeout)
	if !d.Deadline.IsZero() && d.Deadline.Before(until) {
		until = d.Deadline
	}
	hctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	if d.Headers != nil {
		hctx = tracing.Propagator.Extract(hctx, d.Headers)
	}
	attrs := append([]attribute.KeyValue{attribute.String("effectively.source", d.Source)}, d.Attributes...)
	hctx, span := tracing.Tracer().Start(hctx, "intake receive", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	defer span.End()

	v, m := p.decide(ctx, hctx, d, pre)
	if v.Settle == SettleRetry {
		span.SetStatus(codes.Error, "not recorded")
	} else {
		span.SetAttributes(attribute.String("effectively.message_id", v.Result.MessageID),
			attribute.String("effectively.intake.status", string(v.Result.Status)))
		if v.Result.Reason != "" {
			span.SetAttributes(attribute.String("effectively.quarantine.reason", v.Result.Reason))
		}
	}
	p.cfg.Metrics.SourceSettlement(p.cfg.Source, string(v.Settle))
	if d.Settle != nil {
		if err := d.Settle(hctx, v); err != nil {
			p.cfg.Logger.Warn("settle not sent; the broker will deliver it again and the inbox recognise it",
				"source", d.Source, "position", d.Position, "settle", string(v.Settle), "message_id", v.Result.MessageID, "error", err.Error())
		}
	}
	if m != nil {
		p.queueStart(fastStart{m: m, span: span.SpanContext()})
	}
	return v
}

// decide records d (pre: its message, already decoded) and returns its
// verdict, and the message to start on the fast path (nil for none).
func (p *Path) decide(ctx, hctx context.Context, d Delivery, pre *message.Message) (Verdict, *message.Message) {
	// Before its last delivery, a message of a type this worker does not
	// know goes back to the broker for a worker that does (a rolling
	// deploy); the last delivery quarantines it.
	var record recordFunc = p.in.RecordKnown
	if d.Last {
		record = p.in.Record
	}
	if pre != nil {
		record = func(ctx context.Context, _ []byte, source string) (Recorded, error) {
			return p.in.RecordMessage(ctx, pre, source)
		}
	}
	failpoint.Hit(failpoint.IntakeBeforeInsert)
	rec, err := record(hctx, d.Raw, d.Source)
	if err != nil {
		var v *Verdict
		if rec, v = p.fail(ctx, d, record, err); v != nil {
			return *v, nil
		}
	}
	failpoint.Hit(failpoint.IntakeAfterInsert)
	v := Verdict{Settle: SettleAck, Result: rec.Result}
	switch {
	case rec.Status == StatusInvalid && rec.Reason == store.ReasonPayloadMismatch:
		p.stats.mismatches.Add(1)
		v.Settle = SettleQuarantined
	case rec.Status == StatusInvalid:
		p.stats.invalid.Add(1)
		v.Settle = SettleQuarantined
	case rec.New:
		p.stats.recorded.Add(1)
	default:
		v.Copy = true
		p.stats.duplicates.Add(1)
		p.cfg.Logger.Info("redelivered or republished copy recognised", "message_id", rec.MessageID,
			"source", d.Source, "position", d.Position, "delivery", d.Attempt)
	}
	// The delivery that created the row starts the workflow, and so does a
	// redelivery of a row still pending (the delivery before it was not
	// settled: its process most likely died; a broker without a count says
	// 0, and any copy of a pending row may then be one). Another copy of a
	// pending row does not: its first delivery is most likely being
	// started right now, by this or another process, and a start from the
	// copy would cost a Temporal call just to be refused. Were that start
	// lost (a crash after the ack), the Dispatcher starts the row.
	if rec.Pending && rec.Message != nil && (rec.New || d.Attempt != 1) {
		return v, rec.Message
	}
	return v, nil
}

// admit waits until consumer's lane has room for d (PathConfig.OneRoute),
// at most half of d's ack wait (DefaultHandleTimeout without one), and
// returns the function that ends its admission once it is handled. A wait
// keeps d alive when it starts and when it ends, so the ack wait runs
// again from then (d.Received). Past the bound, or when ctx ends, d goes
// on uncounted: its start then waits in its lane, or past it in the inbox
// for the Dispatcher, as without the wait.
func (p *Path) admit(ctx context.Context, d *Delivery, consumer string) (release func()) {
	p.mu.Lock()
	starts := p.starts
	p.mu.Unlock()
	none := func() {}
	if starts == nil {
		return none
	}
	bound := DefaultHandleTimeout
	if d.AckWait > 0 {
		bound = d.AckWait / 2
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
			if d.KeepAlive != nil {
				d.KeepAlive()
				d.Received = time.Now()
			}
		}
	}()
	for {
		ok, shrunk := starts.tryAdmit(consumer, p.ahead)
		if ok {
			return func() { starts.release(consumer) }
		}
		if timer == nil {
			p.stats.waited.Add(1)
			if d.KeepAlive != nil {
				d.KeepAlive()
				d.Received = time.Now()
			}
			timer = time.NewTimer(bound)
		}
		select {
		case <-shrunk:
		case <-timer.C:
			return none
		case <-ctx.Done():
			return none
		}
	}
}

// recordFunc records a delivery's raw message in the inbox.
type recordFunc func(ctx context.Context, raw []byte, source string) (Recorded, error)

// fail hands back a delivery that could not be recorded (a nil Recorded's
// verdict), or holds it when it is the last delivery the broker will make
// (holdLast), which may end recorded after all: then it returns what was
// recorded and a nil verdict.
func (p *Path) fail(ctx context.Context, d Delivery, record recordFunc, cause error) (Recorded, *Verdict) {
	if d.Last {
		return p.holdLast(ctx, d, record, cause)
	}
	var delay time.Duration
	if d.AckWait > 0 {
		// Redeliver when the ack wait would have run out anyway: the
		// redelivery window stays what the broker's configuration says.
		delay = max(d.AckWait-time.Since(d.Received), 0)
	} else {
		b := p.cfg.RetryBackoff
		delay = b[min(max(d.Attempt-1, 0), len(b)-1)]
	}
	p.stats.retries.Add(1)
	p.cfg.Logger.Warn("message not recorded; it will be delivered again", "source", d.Source, "position", d.Position,
		"delivery", d.Attempt, "redeliver_in", delay.String(), "error", cause.Error())
	return Recorded{}, &Verdict{Settle: SettleRetry, Delay: delay, Cause: cause}
}

// holdLast keeps a message whose last delivery could not be recorded: the
// broker will not deliver it again, so giving up would lose it. It keeps
// the delivery alive (d.KeepAlive) and tries again, the inbox record first
// and, when Postgres refused it (refused), the quarantine (max_deliver),
// until one of them commits. So a Postgres outage longer than the broker's
// delivery limit ends with the message recorded, even when Postgres comes
// back between a record and a quarantine, and only a message the inbox
// refuses while the quarantine takes it is quarantined. A nil verdict
// means it was recorded (rec). Once ctx has ended it tries once more, then
// returns a retry: the source hands the delivery back, which is all it can
// still do.
func (p *Path) holdLast(ctx context.Context, d Delivery, record recordFunc, cause error) (rec Recorded, v *Verdict) {
	end := p.in.holds.add(d.Raw)
	defer func() {
		switch {
		case v == nil:
			end(true, rec.Result)
		case v.Settle == SettleQuarantined:
			end(true, v.Result)
		default:
			end(false, Result{})
		}
	}()
	p.cfg.Logger.Warn("message not recorded on its last delivery; holding it and trying again", "source", d.Source,
		"position", d.Position, "delivery", d.Attempt, "error", cause.Error())
	pause := time.Second
	for {
		p.keepAlive(ctx, d, pause)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		rec, err := record(rctx, d.Raw, d.Source)
		cancel()
		if err == nil {
			p.cfg.Logger.Info("message recorded on its last delivery after it was held", "message_id", rec.MessageID,
				"source", d.Source, "position", d.Position)
			return rec, nil
		}
		if !refused(err) {
			// Postgres did not answer: the quarantine would fail the same
			// way, or, were Postgres back this instant, take a message
			// the inbox would take too. Hold it for the record alone.
			if ctx.Err() != nil {
				p.cfg.Logger.Error("message on its last delivery not recorded before shutdown (Postgres did not answer); it is handed back",
					"source", d.Source, "position", d.Position, "error", err.Error())
				p.stats.retries.Add(1)
				return Recorded{}, &Verdict{Settle: SettleRetry, Cause: err}
			}
			pause = min(2*pause, 15*time.Second)
			p.cfg.Logger.Error("message on its last delivery not recorded (Postgres did not answer); holding it and trying again",
				"source", d.Source, "position", d.Position, "error", err.Error(), "retry_in", pause.String())
			continue
		}
		reason := fmt.Errorf("not recorded on its last delivery (%d), %s: %w", d.Attempt, d.Position, err)
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, first, qerr := p.in.rejectFirst(qctx, d.Raw, d.Source, "", "", store.ReasonMaxDeliver, reason)
		cancel()
		if qerr == nil {
			p.countMaxDelivered(first)
			p.cfg.Logger.Warn("message quarantined after its last delivery", "message_id", res.MessageID,
				"quarantine_id", res.QuarantineID, "first", first, "source", d.Source, "position", d.Position, "error", err.Error())
			return Recorded{}, &Verdict{Settle: SettleQuarantined, Result: res, Copy: !first}
		}
		if ctx.Err() != nil {
			p.cfg.Logger.Error("message on its last delivery could be neither recorded nor quarantined before shutdown; it is handed back",
				"source", d.Source, "position", d.Position, "error", qerr.Error())
			p.stats.retries.Add(1)
			return Recorded{}, &Verdict{Settle: SettleRetry, Cause: errors.Join(err, qerr)}
		}
		pause = min(2*pause, 15*time.Second)
		p.cfg.Logger.Error("message on its last delivery neither recorded nor quarantined; holding it and trying again",
			"source", d.Source, "position", d.Position, "error", qerr.Error(), "retry_in", pause.String())
	}
}

// DeadLetterRecordAge is PathConfig.DeadLetterRecordAge's default: half
// the retention horizon's margin. Only a message that arrives within that
// margin may be recorded; an older one's record may have been pruned.
const DeadLetterRecordAge = retention.DefaultMargin / 2

// DeadLetter settles d, a message its broker gave up delivering with no
// worker settling it (a worker killed holding its last delivery, a lost
// pull, RabbitMQ's delivery limit or TTL), taken up from the dead letter
// the broker captured at capturedAt. It counts it once settled
// (effectively_source_dead_letters_total; a dead letter handed back to be
// taken up again is counted then), and not when the inbox holds the
// message already (a copy of the dead letter, or its acks lost) or its
// max_deliver quarantine does (another worker's hold quarantined it). While
// the dead letter is under PathConfig.DeadLetterRecordAge old it is
// handled as a last delivery (Handle: recorded, else quarantined, held
// while Postgres does not answer). Older, or with a zero capturedAt (a
// dead letter never to be recorded: one past its TTL), it is only
// quarantined as max_deliver with detail, and not even that when the
// inbox holds it already (recorded, its acks lost: SettleAck); d.Settle
// carries the verdict out. A SettleRetry verdict means ctx ended first.
// A dead letter of a message this process holds on its last delivery
// (holdLast) waits for the hold first, and is a copy (SettleAck, Copy,
// not counted) when the hold committed the message.
func (p *Path) DeadLetter(ctx context.Context, d Delivery, capturedAt time.Time, detail string) (v Verdict) {
	defer func() {
		if v.Settle != SettleRetry && !v.Copy {
			p.cfg.Metrics.DeadLetter(p.cfg.Source)
		}
	}()
	if h := p.in.holds.find(d.Raw); h != nil && p.awaitHold(ctx, d, h) {
		// Its last delivery is held here, and the hold committed it: the
		// dead letter is a copy (the broker gave up on the held delivery
		// when its keep-alives came late).
		v = Verdict{Settle: SettleAck, Result: h.result, Copy: true}
		p.cfg.Logger.Info("dead letter of a message held here on its last delivery, which settled it: a copy", "source", d.Source,
			"position", d.Position, "message_id", h.result.MessageID)
		p.settleDeadLetter(ctx, d, v)
		return v
	}
	if !capturedAt.IsZero() && time.Since(capturedAt) <= p.cfg.DeadLetterRecordAge {
		p.cfg.Logger.Warn("a message its broker gave up delivering, unsettled; recording it from its dead letter",
			"source", d.Source, "position", d.Position)
		d.Last = true
		return p.Handle(ctx, d)
	}
	v = Verdict{Settle: SettleRetry, Cause: context.Cause(ctx)}
	if res, dup, ok := p.quarantineDeadLetter(ctx, d.Raw, detail); ok {
		v = Verdict{Settle: SettleQuarantined, Result: res, Copy: dup}
		if res.QuarantineID == 0 {
			v.Settle = SettleAck // the inbox holds it
		}
		p.cfg.Logger.Warn("dead letter quarantined, or already in the inbox (quarantine_id 0)", "source", d.Source,
			"position", d.Position, "message_id", res.MessageID, "quarantine_id", res.QuarantineID)
	}
	p.settleDeadLetter(ctx, d, v)
	return v
}

// settleDeadLetter counts v and settles d, a dead letter, with it.
func (p *Path) settleDeadLetter(ctx context.Context, d Delivery, v Verdict) {
	p.cfg.Metrics.SourceSettlement(p.cfg.Source, string(v.Settle))
	if d.Settle != nil {
		if err := d.Settle(ctx, v); err != nil {
			p.cfg.Logger.Warn("settle of a dead letter not sent; the broker hands it over again", "source", d.Source,
				"position", d.Position, "error", err.Error())
		}
	}
}

// quarantineDeadLetter keeps raw, a dead letter, in the quarantine as
// max_deliver with detail, unless the inbox holds it already (then a
// StatusDuplicate result with no QuarantineID). dup is true when the inbox
// or the quarantine held it already. It tries again, 1 s and then up to
// 15 s apart, until the row commits; ok is false when ctx ended first, the
// message then left with the broker.
func (p *Path) quarantineDeadLetter(ctx context.Context, raw []byte, detail string) (res Result, dup, ok bool) {
	var consumer, id string
	if len(raw) <= message.MaxSize {
		if m, err := p.in.cfg.Routes.Decode(raw); err == nil {
			consumer, id = m.Consumer, m.ID
		}
	}
	for pause := time.Second; ; pause = min(2*pause, 15*time.Second) {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		res, dup, err := p.keepDeadLetter(qctx, raw, consumer, id, detail)
		cancel()
		if err == nil {
			return res, dup, true
		}
		p.cfg.Logger.Error("quarantine of a dead letter failed; holding it and trying again", "source", p.cfg.Source,
			"message_id", id, "error", err.Error(), "retry_in", pause.String())
		select {
		case <-ctx.Done():
			return Result{}, false, false
		case <-time.After(pause):
		}
	}
}

// keepDeadLetter is one try of quarantineDeadLetter.
func (p *Path) keepDeadLetter(ctx context.Context, raw []byte, consumer, id, detail string) (res Result, dup bool, err error) {
	if id != "" {
		has, err := p.in.store.InboxHas(ctx, consumer, id)
		if err != nil {
			return Result{}, false, err
		}
		if has {
			return Result{MessageID: id, Status: StatusDuplicate}, true, nil
		}
	}
	res, first, err := p.in.rejectFirst(ctx, raw, p.cfg.Source, consumer, id, store.ReasonMaxDeliver, errors.New(detail))
	if err != nil {
		return Result{}, false, err
	}
	p.countMaxDelivered(first)
	return res, !first, nil
}

// countMaxDelivered counts a max_deliver quarantine, or a copy when the
// quarantine held the message already (Intake.quarantineFirst).
func (p *Path) countMaxDelivered(first bool) {
	if first {
		p.stats.maxDelivered.Add(1)
	} else {
		p.stats.duplicates.Add(1)
	}
}

// refused reports whether err is Postgres refusing the statement itself,
// not a failure to reach it (a network error, a closed connection, a
// timeout) nor a transient answer: SQLSTATE class 08 (connection), 40
// (serialization, deadlock), 53 (resources: too many connections) or 57
// (a shutdown, a cancelled statement); 55P03 (a lock not available), 25006
// (a read-only server: a failover not yet seen), and 0A000's "cached plan
// must not change result type" (a migration under a prepared statement;
// pgx drops its cache and the next try goes through).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:min(2, len(pgErr.Code))] {
	case "08", "40", "53", "57":
		return false
	}
	switch pgErr.Code {
	case "55P03", "25006":
		return false
	case "0A000":
		return !strings.Contains(pgErr.Message, "cached plan must not change result type")
	}
	return true
}

// keepAlive waits pause, or until ctx ends, keeping d alive (d.KeepAlive)
// when it starts and, for a broker with an ack wait, every third of it.
func (p *Path) keepAlive(ctx context.Context, d Delivery, pause time.Duration) {
	if d.KeepAlive == nil {
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		return
	}
	d.KeepAlive()
	every := pause
	if d.AckWait > 0 {
		every = max(d.AckWait/3, 10*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.NewTimer(pause)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
			d.KeepAlive()
		}
	}
}

// queueStart hands s to a starter, or leaves it to the Dispatcher when the
// starters are busy or closed.
func (p *Path) queueStart(s fastStart) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starts == nil {
		return
	}
	_ = p.starts.push(s) // its lane full: the dispatcher picks it up
}

// startFast starts the workflow of a message just settled, and marks its
// inbox row dispatched, without holding the row's lock across the start (a
// Dispatcher only takes rows older than its MinAge, and a start it makes
// anyway is refused as already started). A failure is only logged: the row
// stays pending and a Dispatcher pass starts it.
func (p *Path) startFast(ctx context.Context, s fastStart) {
	m := s.m
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The start continues the delivery's trace: Temporal's tracing
	// interceptor carries it into the workflow.
	sctx = trace.ContextWithSpanContext(sctx, s.span)
	started, err := p.in.Dispatch(sctx, m)
	if err != nil {
		p.cfg.Logger.Warn("start after settle failed; the dispatcher will retry", "message_id", m.ID, "source", p.cfg.Source, "error", err.Error())
		return
	}
	if started {
		p.stats.started.Add(1)
	}
}

// fastStart is a message to start on the fast path, with the span of the
// delivery that recorded it.
type fastStart struct {
	m    *message.Message
	span trace.SpanContext
}
