package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Defaults of the Kafka intake. internal/config applies them.
const (
	// DefaultTopic is the topic messages are consumed from.
	DefaultTopic = "effectively.messages"
	// DefaultGroup is the consumer group every worker process joins, so the
	// topic's partitions are spread over them.
	DefaultGroup = "effectively-worker"
	// DefaultMaxPollRecords bounds a batch: rebalances wait for it.
	DefaultMaxPollRecords = 500
	// DefaultHandlers is how many records of a batch are recorded at once;
	// the inbox commits their inserts together.
	DefaultHandlers = 64
	// DefaultStallFirst and DefaultStallLongest bound the pause before a stalled
	// partition is read again; it doubles from one to the other.
	DefaultStallFirst   = time.Second
	DefaultStallLongest = 30 * time.Second
	// DefaultSessionTimeout is how long the group waits for a member that
	// stopped heartbeating (a SIGKILLed worker) before its partitions move;
	// Kafka's own default is 45s.
	DefaultSessionTimeout = 15 * time.Second
	// DefaultUnknownTypeStalls is how many stalls a record of a type this
	// worker does not know gets (a rolling deploy adding the type) before
	// it is quarantined.
	DefaultUnknownTypeStalls = 5
	// DefaultName is the source's name: its metrics label, health check
	// and the source of its inbox and quarantine rows.
	DefaultName = "kafka"
	// DefaultBatchBound bounds the handling of one batch. Rebalances wait
	// for it (BlockRebalanceOnPoll), and a member that holds a rebalance
	// past the group's rebalance timeout (kgo's default, 60 s) is expelled.
	DefaultBatchBound = 40 * time.Second
)

// Config configures a Consumer. Zero values take the defaults noted per
// field.
type Config struct {
	// Name is the source's name (intake.Source.Name). Default DefaultName.
	Name string
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic is the topic to consume. Default DefaultTopic.
	Topic string
	// Group is the consumer group. Default DefaultGroup.
	Group string
	// MaxPollRecords bounds a batch. Default DefaultMaxPollRecords.
	MaxPollRecords int
	// Handlers is how many records are recorded at once. Default
	// DefaultHandlers.
	Handlers int
	// StallFirst and StallLongest bound the pause before a partition whose
	// record could not be recorded is read again. Defaults DefaultStallFirst,
	// DefaultStallLongest.
	StallFirst, StallLongest time.Duration
	// SessionTimeout is how long the group waits for a silent member before
	// it reassigns its partitions. Default DefaultSessionTimeout.
	SessionTimeout time.Duration
	// UnknownTypeStalls is how many stalls a record of an unknown type gets
	// before it is quarantined. Default DefaultUnknownTypeStalls.
	UnknownTypeStalls int
	// BatchBound bounds the handling of one batch: a record not recorded
	// by then (Postgres hanging) stalls its partition, read again after
	// the pause. Default DefaultBatchBound.
	BatchBound time.Duration
	// Starters bounds the workflow starts in flight on the fast path.
	// Default intake.DefaultStarters.
	Starters int
	// Logger receives a line per stalled partition and failed commit.
	// Default slog.Default().
	Logger *slog.Logger
	// Metrics counts the settlements under Name. Nil counts nothing.
	Metrics *metrics.Metrics
	// ClientOpts are added to the client's options (TLS, SASL, timeouts).
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.UnknownTypeStalls <= 0 {
		c.UnknownTypeStalls = DefaultUnknownTypeStalls
	}
	if c.BatchBound <= 0 {
		c.BatchBound = DefaultBatchBound
	}
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.MaxPollRecords <= 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.Handlers <= 0 {
		c.Handlers = DefaultHandlers
	}
	if c.StallFirst <= 0 {
		c.StallFirst = DefaultStallFirst
	}
	if c.StallLongest <= 0 {
		c.StallLongest = DefaultStallLongest
	}
	c.StallLongest = max(c.StallLongest, c.StallFirst)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one seed broker (host:port) is required"))
	}
	for _, b := range c.Brokers {
		if b == "" || !strings.Contains(b, ":") {
			errs = append(errs, fmt.Errorf("brokers: %q is not host:port", b))
		}
	}
	if err := validTopic(c.withDefaults().Topic); err != nil {
		errs = append(errs, fmt.Errorf("topic: %w", err))
	}
	return errors.Join(errs...)
}

// validTopic checks a Kafka topic name: 1–249 of [a-zA-Z0-9._-], not "."
// or "..".
func validTopic(s string) error {
	if s == "" || len(s) > 249 || s == "." || s == ".." {
		return fmt.Errorf("topic name %q must be 1 to 249 characters, not '.' or '..'", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q: only letters, digits, '.', '_' and '-' are allowed", s)
		}
	}
	return nil
}

// Consumer consumes a Kafka topic, as a member of a consumer group, into
// the inbox.
type Consumer struct {
	path  *intake.Path
	cl    *kgo.Client
	cfg   Config
	track *tracker
	// stalls holds the partitions paused after a failure, with the time
	// they are read again; the poll loop owns it, and the revoke and lost
	// callbacks, which run between batches (BlockRebalanceOnPoll).
	stalls map[partition]*stall
	mu     sync.Mutex // guards track and stalls against the callbacks
	nstall atomic.Int64
}

// stall is a partition rewound to its first unrecorded record and paused.
type stall struct {
	// until is when it is read again; zero once resumed.
	until time.Time
	pause time.Duration
	// from is the record it stalled on; unknown counts its stalls for a
	// type this worker does not know.
	from    int64
	unknown int
}

var _ intake.Source = (*Consumer)(nil)

// NewConsumer returns a Consumer of cfg.Topic recording into in. The client
// joins the group at Run's first poll.
func NewConsumer(in *intake.Intake, cfg Config) (*Consumer, error) {
	if in == nil {
		return nil, errors.New("kafka consumer: intake is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	cfg = cfg.withDefaults()
	path, err := intake.NewPath(in, intake.PathConfig{Source: cfg.Name, Starters: cfg.Starters, StartQueue: cfg.MaxPollRecords,
		Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	c := &Consumer{path: path, cfg: cfg, track: newTracker(), stalls: make(map[partition]*stall)}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		// Commit only what was marked: the contiguous settled prefix.
		kgo.AutoCommitMarks(),
		// A rebalance waits for the batch in hand to be settled and
		// marked, so revoke commits what was done and nothing more.
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// A stalled partition is resumed between polls: a poll with
		// nothing to return must come back to let it.
		kgo.FetchMaxWait(time.Second),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka consumer: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Name is the source's name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Stats returns the source's counters; Retries counts records not
// recorded, each of which stalled its partition.
func (c *Consumer) Stats() intake.SourceStats { return c.path.Stats() }

// Stalls counts the times a partition was rewound and paused.
func (c *Consumer) Stalls() int64 { return c.nstall.Load() }

// Check is ready when a broker answers.
func (c *Consumer) Check() health.Check {
	return health.Check{Name: "source." + c.cfg.Name, Fn: func(ctx context.Context) error {
		if err := c.cl.Ping(ctx); err != nil {
			return fmt.Errorf("kafka brokers %v: %w", c.cfg.Brokers, err)
		}
		return nil
	}}
}

// Client is the consumer's franz-go client (for the horizon check and
// tests).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// revoked commits the marks before partitions go to another member: the
// batch they came from is settled (rebalances wait for it), so the new
// owner resumes just past what is recorded. It runs on the group's
// goroutine between batches.
func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		c.cfg.Logger.Warn("commit on revoke failed; the next owner re-reads from the last commit and the inbox recognises the copies",
			"group", c.cfg.Group, "error", err.Error())
	}
	c.drop(cl, revoked)
}

// lost forgets partitions taken away without a revoke (the member was
// fenced or timed out): another member may own them already, so no commit
// is attempted.
func (c *Consumer) lost(_ context.Context, cl *kgo.Client, lost map[string][]int32) {
	c.drop(cl, lost)
}

// drop forgets the tracking and stall of partitions this member no longer
// owns, and resumes them (a pause outlives the assignment in kgo).
func (c *Consumer) drop(cl *kgo.Client, parts map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	resume := make(map[string][]int32)
	for topic, ps := range parts {
		for _, p := range ps {
			k := partition{topic, p}
			c.track.forget(k)
			if _, ok := c.stalls[k]; ok {
				delete(c.stalls, k)
				resume[topic] = append(resume[topic], p)
			}
		}
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}

// Run polls and records until ctx ends. Each poll returns at most
// MaxPollRecords records, recorded by up to Handlers goroutines; the
// contiguous settled prefix of each partition is then marked, a partition
// with an unrecorded record is rewound to it and paused, and only then may
// the group rebalance. On shutdown the batch in hand is settled, the marks
// are committed and the client leaves the group.
func (c *Consumer) Run(ctx context.Context) error {
	c.path.Open(ctx)
	defer c.path.Close()
	defer c.shutdown()

	var lastErr string
	for ctx.Err() == nil {
		c.resumeDue()
		pctx, cancel := context.WithTimeout(ctx, c.pollWait())
		fetches := c.cl.PollRecords(pctx, c.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if msg := err.Error(); msg != lastErr { // one line per new error, not per poll
				lastErr = msg
				c.cfg.Logger.Warn("kafka fetch failed; retrying", "topic", topic, "partition", p, "error", msg)
			}
		})
		c.settle(ctx, fetches.Records())
		c.cl.AllowRebalance()
	}
	return nil
}

// shutdown commits the marks of the settled records and leaves the group.
// The leave waits for a join in flight, which the group holds until every
// member rejoined (up to the rebalance timeout, 60s): after closeTimeout
// the worker goes on stopping, and the group drops this member after its
// session timeout. The marks are committed by then; what is not is re-read
// by the next owner, a copy the inbox recognises.
func (c *Consumer) shutdown() {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.cl.CommitMarkedOffsets(cctx); err != nil {
		c.cfg.Logger.Warn("commit at shutdown failed; the next owner re-reads from the last commit and the inbox recognises the copies",
			"group", c.cfg.Group, "error", err.Error())
	}
	closed := make(chan struct{})
	go func() {
		c.cl.CloseAllowingRebalance()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeTimeout):
		c.cfg.Logger.Warn("kafka client still leaving the group (a rebalance is in progress); going on with the shutdown",
			"group", c.cfg.Group, "waited", closeTimeout.String())
	}
}

// closeTimeout bounds the wait for the client to leave the group at
// shutdown.
const closeTimeout = 5 * time.Second

// pollWait is how long a poll may wait for records: until the next stalled
// partition is due, at most a second.
func (c *Consumer) pollWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	wait := time.Second
	for _, s := range c.stalls {
		wait = min(wait, time.Until(s.until))
	}
	return max(wait, 10*time.Millisecond)
}

// resumeDue resumes the stalled partitions whose pause is over.
func (c *Consumer) resumeDue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	resume := make(map[string][]int32)
	for p, s := range c.stalls {
		if !now.Before(s.until) && !s.until.IsZero() {
			s.until = time.Time{} // resumed; the pause is kept until a batch of it settles
			resume[p.topic] = append(resume[p.topic], p.part)
		}
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// settle records a batch, marks the settled prefix of each partition and
// stalls the partitions with a record that could not be recorded.
func (c *Consumer) settle(ctx context.Context, records []*kgo.Record) {
	c.mu.Lock()
	kept := records[:0]
	for _, r := range records {
		// A record of a partition still paused was buffered before the
		// rewind (kgo drops those; this is a second guard): it is read
		// again after the record it stalled on, never tracked past it.
		if s, ok := c.stalls[partition{r.Topic, r.Partition}]; ok && !s.until.IsZero() {
			continue
		}
		kept = append(kept, r)
	}
	records = kept
	if len(records) == 0 {
		c.mu.Unlock()
		return
	}
	for _, r := range records {
		p := partition{r.Topic, r.Partition}
		if err := c.track.add(p, r.Offset, r.LeaderEpoch); err != nil {
			// kgo hands a partition's records out in order; a record
			// out of it (the client reset the partition's position)
			// starts the partition's tracking again from it. A mark
			// never moves back, so nothing is committed past a record
			// that is not settled.
			c.cfg.Logger.Error("kafka record out of order; tracking the partition again from it", "partition", p.String(), "error", err.Error())
			c.track.forget(p)
			_ = c.track.add(p, r.Offset, r.LeaderEpoch)
		}
	}
	c.mu.Unlock()

	// A record of a type this worker does not know is handed back (for a
	// worker that knows it) until it has stalled UnknownTypeStalls times:
	// then it is the last delivery, and quarantined.
	last := make(map[partition]int64)
	for p, s := range c.stalls {
		if s.unknown >= c.cfg.UnknownTypeStalls {
			last[p] = s.from
		}
	}
	type result struct {
		p      partition
		offset int64
		err    error
	}
	results := make([]result, len(records))
	// One bound for the whole batch: each partition whose record failed
	// costs a handling timeout, and a record still handled or not begun
	// when the bound passes is not recorded (its partition stalls), so a
	// Postgres that hangs holds a rebalance for BatchBound at most.
	bctx, cancel := context.WithTimeout(ctx, c.cfg.BatchBound)
	defer cancel()
	work := make(chan int)
	var (
		wg       sync.WaitGroup
		failedMu sync.Mutex
		// failedNow holds the partitions with a record not recorded in
		// this batch: their later records are not handled (they are read
		// again after it), so a Postgres that hangs costs one handling
		// timeout per partition, not one per record, and the batch ends
		// within the group's rebalance timeout.
		failedNow = make(map[partition]bool)
	)
	for range min(c.cfg.Handlers, len(records)) {
		wg.Go(func() {
			for i := range work {
				r := records[i]
				p := partition{r.Topic, r.Partition}
				failedMu.Lock()
				skip := failedNow[p]
				failedMu.Unlock()
				if skip {
					results[i] = result{p, r.Offset, errSkipped}
					continue
				}
				if bctx.Err() != nil {
					results[i] = result{p, r.Offset, errPastBound}
					continue
				}
				from, ok := last[p]
				err := c.handle(bctx, r, ok && from == r.Offset)
				if err != nil {
					failedMu.Lock()
					failedNow[p] = true
					failedMu.Unlock()
				}
				results[i] = result{p, r.Offset, err}
			}
		})
	}
	for i := range records {
		work <- i
	}
	close(work)
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	failed := make(map[partition]error)
	for _, res := range results {
		if res.err != nil {
			if prev, seen := failed[res.p]; !seen || errors.Is(prev, errSkipped) || errors.Is(prev, errPastBound) {
				failed[res.p] = res.err
			}
			continue
		}
		if err := c.track.done(res.p, res.offset); err != nil {
			c.cfg.Logger.Error("kafka record settled but not tracked; its mark is left to the next record", "error", err.Error())
		}
	}
	if marks := c.track.marks(); len(marks) > 0 {
		c.cl.MarkCommitOffsets(marks)
	}
	for _, res := range results {
		if _, bad := failed[res.p]; !bad {
			if s, ok := c.stalls[res.p]; ok && s.until.IsZero() {
				delete(c.stalls, res.p) // read again and recorded: the stall is over
			}
		}
	}
	for p, cause := range failed {
		c.stallPartition(p, cause)
	}
}

// errSkipped marks a record not handled because an earlier one of its
// partition failed in the same batch.
var errSkipped = errors.New("not handled: an earlier record of its partition was not recorded")

// errPastBound marks a record not handled because its batch's bound
// (Config.BatchBound) had passed.
var errPastBound = errors.New("not handled: the batch's bound passed")

// stallPartition rewinds p to its first unrecorded record and pauses it for
// a growing while: the record is neither skipped nor retried at once. The
// watermark stays below it, so a crash or a rebalance meanwhile re-reads it
// too.
func (c *Consumer) stallPartition(p partition, cause error) {
	from, ok := c.track.firstUnsettled(p)
	c.track.forget(p)
	if !ok {
		return
	}
	s := c.stalls[p]
	if s == nil {
		s = &stall{pause: c.cfg.StallFirst}
		c.stalls[p] = s
	} else {
		s.pause = min(2*s.pause, c.cfg.StallLongest)
	}
	if s.from != from.Offset {
		s.from, s.unknown = from.Offset, 0
	}
	if errors.Is(cause, intake.ErrUnknownType) {
		s.unknown++
	}
	s.until = time.Now().Add(s.pause)
	c.nstall.Add(1)
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.topic: {p.part: from}})
	c.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.part}})
	c.cfg.Logger.Warn("record not recorded; partition stalled, to be read again from it", "topic", p.topic, "partition", p.part,
		"offset", from.Offset, "retry_in", s.pause.String(), "error", cause.Error())
}

// handle hands one record to the Path. A nil error means it is settled
// (recorded, a copy, or quarantined); an error means its fate is not, and
// the record must be read again. last marks a record the consumer gives up
// handing back (an unknown type, stalled UnknownTypeStalls times).
//
// The verdict is carried out by the poll loop once the batch is handled
// (marks, stalls), so the Delivery has no Settle of its own.
func (c *Consumer) handle(ctx context.Context, r *kgo.Record, last bool) error {
	deadline, _ := ctx.Deadline()
	v := c.path.Handle(ctx, intake.Delivery{
		Deadline: deadline,
		Raw:      r.Value,
		Source:   c.cfg.Name,
		Attempt:  0, // Kafka keeps no delivery count
		Last:     last,
		Headers:  tracing.RecordHeaders{Headers: &r.Headers},
		Position: fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset),
		Attributes: []attribute.KeyValue{
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", r.Topic),
			attribute.String("messaging.consumer.group.name", c.cfg.Group),
			attribute.Int("messaging.destination.partition.id", int(r.Partition)),
			attribute.Int64("messaging.kafka.offset", r.Offset),
		},
	})
	if v.Settle == intake.SettleRetry {
		if v.Cause == nil {
			return errors.New("not recorded")
		}
		return v.Cause
	}
	return nil
}
