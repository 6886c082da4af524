package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// DeadLettersOff is the Config.DeadLetters that captures no max-delivery
// advisories: a last delivery that no worker settles is then left in the
// stream unrecorded.
const DeadLettersOff = "off"

// DeadLetterStream is Config.DeadLetters' default for stream: the stream
// that captures its consumers' max-delivery advisories.
func DeadLetterStream(stream string) string { return stream + "_MAX_DELIVERIES" }

// advisorySubject is where the broker announces that durable on stream
// delivered a message its MaxDeliver times without an ack or a term.
func advisorySubject(stream, durable string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + durable
}

// deadLetterMaxAge is how long the dead-letter stream keeps an advisory:
// long past deadLetterRecordAge, so that a worker that comes back after a
// long stop still quarantines what its consumers gave up on meanwhile.
const deadLetterMaxAge = 7 * 24 * time.Hour

// deadLetterRecordAge is the Path's DeadLetterRecordAge (0: its default),
// a variable for the tests.
var deadLetterRecordAge time.Duration

// deadLetterAckWait is the dead-letter consumer's ack wait; a held dead
// letter is kept in progress a third of it apart.
const deadLetterAckWait = 30 * time.Second

// EnsureDeadLetters creates the stream that captures cfg's max-delivery
// advisories when it is missing, and the durable that reads cfg.Durable's
// (cfg.Durable-dead-letters, from the stream's first advisory on), and
// returns that durable; nil with DeadLettersOff. The stream has as many
// replicas as cfg.Stream. NewConsumer calls it.
func EnsureDeadLetters(ctx context.Context, js natsjs.JetStream, cfg Config) (natsjs.Consumer, error) {
	cfg = cfg.withDefaults()
	if cfg.DeadLetters == DeadLettersOff {
		return nil, nil
	}
	// As many replicas as the stream it serves: a dead letter is the last
	// trace of a message that stream delivers no more.
	src, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	spec := StreamSpec{Name: cfg.DeadLetters, Subjects: []string{advisorySubject(cfg.Stream, "*")}, MaxAge: deadLetterMaxAge, MaxMsgSize: -1,
		Replicas: src.CachedInfo().Config.Replicas}
	if _, _, err := EnsureStream(ctx, js, spec); err != nil {
		return nil, fmt.Errorf("dead letters of stream %s (NATS_DEAD_LETTER_STREAM): %w", cfg.Stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.DeadLetters, natsjs.ConsumerConfig{
		Durable:       cfg.Durable + "-dead-letters",
		Description:   "effectively: quarantine or record what " + cfg.Durable + " delivered its last time unsettled",
		FilterSubject: advisorySubject(cfg.Stream, cfg.Durable),
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       deadLetterAckWait,
		MaxDeliver:    -1, // a dead letter stays until it is recorded or quarantined
		DeliverPolicy: natsjs.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("dead-letter consumer of %s on stream %s (NATS_DEAD_LETTER_STREAM): %w", cfg.Durable, cfg.DeadLetters, err)
	}
	return cons, nil
}

// maxDeliveries is the broker's advisory (io.nats.jetstream.advisory.v1.max_deliver).
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// runDeadLetters reads the advisories of the messages the broker delivered
// its MaxDeliver times with none of them settled (a worker killed while it
// held the last delivery, a pull lost with it in transit, a delivery
// handed back on shutdown), until ctx ends. Each message is read from the
// stream and goes through the Path as a last delivery: recorded, else
// quarantined (max_deliver); an advisory older than
// intake.DeadLetterRecordAge is quarantined only (intake.Path.DeadLetter).
// The advisory is acked once that committed.
func (c *Consumer) runDeadLetters(ctx context.Context, dl natsjs.Consumer) {
	pause := time.Second
	for ctx.Err() == nil {
		iter, err := dl.Messages(natsjs.PullMaxMessages(16), natsjs.PullExpiry(c.cfg.FetchWait))
		if err == nil {
			pause = time.Second
			err = c.deadLetterSession(ctx, iter)
		}
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Warn("pull of dead letters from jetstream failed", "stream", c.cfg.DeadLetters, "consumer", c.cfg.Durable,
			"error", errString(err), "retry_in", pause.String())
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

func (c *Consumer) deadLetterSession(ctx context.Context, iter natsjs.MessagesContext) error {
	stop := context.AfterFunc(ctx, iter.Stop) // an unsettled advisory comes again after its ack wait
	defer stop()
	for {
		msg, err := iter.Next()
		if err != nil {
			iter.Stop()
			if errors.Is(err, natsjs.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		c.deadLetter(ctx, msg)
	}
}

// deadLetter settles one advisory.
func (c *Consumer) deadLetter(ctx context.Context, adv natsjs.Msg) {
	var a maxDeliveries
	if err := json.Unmarshal(adv.Data(), &a); err != nil || a.StreamSeq == 0 {
		c.cfg.Logger.Error("unreadable max-delivery advisory; dropped", "stream", c.cfg.DeadLetters, "error", errString(err), "advisory", string(adv.Data()))
		_ = adv.Term()
		return
	}
	position := fmt.Sprintf("stream %s seq %d", a.Stream, a.StreamSeq)
	st, err := c.js.Stream(ctx, a.Stream)
	var msg *natsjs.RawStreamMsg
	if err == nil {
		msg, err = st.GetMsg(ctx, a.StreamSeq)
	}
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		c.cfg.Logger.Error("a message the broker stopped delivering is no longer in its stream (its limits dropped it); nothing to record or quarantine",
			"position", position, "consumer", a.Consumer, "deliveries", a.Deliveries)
		_ = adv.Ack()
		return
	}
	if err != nil {
		c.cfg.Logger.Warn("a dead letter's message could not be read; it comes again", "position", position, "error", err.Error())
		_ = adv.NakWithDelay(time.Second)
		return
	}
	if slices.Contains(c.cfg.Skip, msg.Subject) {
		_ = adv.Ack() // a route's own consumer records it
		return
	}
	var captured time.Time
	if md, err := adv.Metadata(); err == nil {
		captured = md.Timestamp
	}
	if msg.Time.After(captured) && !captured.IsZero() {
		// The sequence holds a message stored after the advisory: the
		// stream was deleted and made again, and its message is gone.
		c.cfg.Logger.Error("a dead letter names a stream sequence that now holds a newer message (the stream was made again); its own message is gone",
			"position", position, "consumer", a.Consumer, "advisory_time", captured, "message_time", msg.Time)
		_ = adv.Ack()
		return
	}
	c.path.DeadLetter(ctx, intake.Delivery{
		Raw:      msg.Data,
		Source:   c.cfg.Name,
		Attempt:  int(min(a.Deliveries+1, 1<<31-1)), // one more than the broker made: a pending row it finds is started
		Headers:  tracing.HeaderCarrier(msg.Header),
		AckWait:  deadLetterAckWait,
		Position: fmt.Sprintf("%s (dead letter of %s after %d deliveries)", position, a.Consumer, a.Deliveries),
		Attributes: []attribute.KeyValue{
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject),
			attribute.String("messaging.consumer.group.name", c.cfg.Durable),
		},
		Settle: func(_ context.Context, v intake.Verdict) error {
			if v.Settle == intake.SettleRetry {
				return adv.NakWithDelay(v.Delay)
			}
			return adv.Ack()
		},
		KeepAlive: func() { _ = adv.InProgress() },
	}, captured, fmt.Sprintf("jetstream stopped delivering it after %d deliveries to %s (%s) and its dead letter was taken up only after %s: quarantined, not recorded, since its record may have been pruned",
		a.Deliveries, a.Consumer, position, time.Since(captured).Round(time.Second)))
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}
