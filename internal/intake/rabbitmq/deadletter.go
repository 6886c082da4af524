package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/effectively/effectively/internal/intake"
)

// runDeadLetters takes up what the broker dead-letters from the queue, and
// acks each one only after it committed. A message past its delivery limit
// (3.x counts a worker's crash against it) is recorded like a last
// delivery, else quarantined, while the dead-lettering is recent; the rest
// (its TTL passed, or older) is quarantined with the broker's reason
// (intake.Path.DeadLetter). Until then the message stays in
// DeadLetterQueue: a record or quarantine that fails is retried while the
// message is held, never rejected (a dead-letter queue on 4.x has a
// delivery limit of its own), and one handed back often (a worker stopped
// or cut off while holding it) is published again before that limit can
// drop it (renewDeadLetter).
func (c *Consumer) runDeadLetters(ctx context.Context) {
	pause := 500 * time.Millisecond
	for ctx.Err() == nil {
		err := c.deadLetterSession(ctx)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Warn("rabbitmq dead-letter consumer disconnected; reconnecting", "queue", c.cfg.DeadLetterQueue, "error", errString(err), "retry_in", pause.String())
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
}

func (c *Consumer) deadLetterSession(ctx context.Context) error {
	conn, err := c.dial(c.cfg.URL, "effectively worker dead letters "+c.cfg.DeadLetterQueue)
	if err != nil {
		return err
	}
	defer func() { _ = CloseConn(conn) }()
	fail := c.watchSetup(ctx, conn)
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("open channel: %w", err))
	}
	if err := Declare(ch, c.cfg); err != nil {
		return fail(err)
	}
	if err := ch.Qos(16, 0, false); err != nil {
		return fail(fmt.Errorf("qos: %w", err))
	}
	version, err := ServerVersion(conn.Properties)
	if err != nil {
		return fail(err)
	}
	var renew *amqp.Channel // nil: returns do not count against the queue
	if !version.atLeast(4, 3) {
		if renew, err = conn.Channel(); err == nil {
			err = renew.Confirm(false)
		}
		if err != nil {
			return fail(fmt.Errorf("open the dead letters' confirm channel: %w", err))
		}
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	msgs, err := ch.Consume(c.cfg.DeadLetterQueue, "effectively-dead-letters", false, false, false, false, nil)
	if err = fail(err); err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.DeadLetterQueue, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil // unacked dead letters go back to their queue with the connection
		case e := <-closed:
			return e
		case m, ok := <-msgs:
			if !ok {
				return fmt.Errorf("dead-letter consumer of %s cancelled", c.cfg.DeadLetterQueue)
			}
			if renew != nil && AttemptsOf(version, m.Headers).Failures >= deadLetterRenewAt {
				err := c.renewDeadLetter(ctx, renew, m)
				if err == nil {
					continue
				}
				c.cfg.Logger.Warn("could not publish a dead letter again to reset its return count; taking it up as it is",
					"queue", c.cfg.DeadLetterQueue, "error", err.Error())
			}
			if !c.quarantineDeadLetter(ctx, m) {
				return nil
			}
		}
	}
}

// deadLetterRenewAt is how many returns of a dead letter (a worker stopped
// or cut off while holding it, Postgres out of reach past the consumer
// timeout) make it be published again before it is taken up: before 4.3
// every return counts, and since 4.0 a quorum queue declared without a
// delivery limit has 20, past which a queue without a dead-letter exchange,
// as the dead-letter queue is, drops the message. A variable for the tests.
var deadLetterRenewAt = 10

// renewDeadLetter publishes m again to the dead-letter queue, with its body,
// properties and headers (the broker's x-death kept under deathHeader too,
// in case a server drops a published x-death), waits for the broker's
// confirm, and then acks m: the copy starts with no return counted. A crash
// between the two leaves both, and the second taken up is a copy.
func (c *Consumer) renewDeadLetter(ctx context.Context, ch *amqp.Channel, m amqp.Delivery) error {
	headers := amqp.Table{}
	for k, v := range m.Headers {
		if k != "x-delivery-count" && k != "x-acquired-count" {
			headers[k] = v
		}
	}
	headers[deathHeader] = deathReason(m.Headers)
	if at, ok := deathTime(m.Headers); ok {
		headers[deathTimeHeader] = at
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	confirm, err := ch.PublishWithDeferredConfirmWithContext(pctx, "", c.cfg.DeadLetterQueue, true, false, amqp.Publishing{
		Headers: headers, ContentType: m.ContentType, ContentEncoding: m.ContentEncoding, DeliveryMode: amqp.Persistent,
		CorrelationId: m.CorrelationId, MessageId: m.MessageId, Timestamp: m.Timestamp, Type: m.Type, AppId: m.AppId, Body: m.Body,
	})
	if err != nil {
		return fmt.Errorf("publish to %s: %w", c.cfg.DeadLetterQueue, err)
	}
	acked, err := confirm.WaitContext(pctx)
	switch {
	case err != nil:
		return fmt.Errorf("confirm of the publish to %s: %w", c.cfg.DeadLetterQueue, err)
	case !acked:
		return fmt.Errorf("the broker refused the publish to %s", c.cfg.DeadLetterQueue)
	}
	if err := m.Ack(false); err != nil {
		return fmt.Errorf("ack of the returned dead letter (its copy is published): %w", err)
	}
	c.stats.renewed.Add(1)
	c.cfg.Logger.Info("dead letter published again to reset its return count", "queue", c.cfg.DeadLetterQueue,
		"returns", AttemptsOf(Version{}, m.Headers).Failures)
	return nil
}

// deathHeader and deathTimeHeader carry a renewed dead letter's reason and
// time of dead-lettering (renewDeadLetter).
const (
	deathHeader     = "x-effectively-death-reason"
	deathTimeHeader = "x-effectively-death-time"
)

// quarantineDeadLetter takes up m through the Path (intake.Path.DeadLetter:
// recorded like a last delivery when it went past the delivery limit
// recently, else quarantined with the broker's reason) and acks it. It
// reports false when ctx ended first (m is left unacked).
func (c *Consumer) quarantineDeadLetter(ctx context.Context, m amqp.Delivery) bool {
	why := deathReason(m.Headers)
	detail := fmt.Sprintf("dead-lettered by rabbitmq from queue %s (%s): ", c.cfg.Queue, why)
	var captured time.Time // zero: never recorded
	switch why {
	case "expired":
		detail += fmt.Sprintf("not acked within the queue's message TTL (%s)", c.cfg.MessageTTL)
	case "delivery_limit":
		detail += fmt.Sprintf("returned more often than the delivery limit (%d)", c.cfg.MaxDeliver)
		captured, _ = deathTime(m.Headers)
	default:
		detail += "see the x-death header"
	}
	settled := false
	c.path.DeadLetter(ctx, intake.Delivery{
		Raw:      m.Body,
		Source:   c.cfg.Name,
		Attempt:  c.cfg.MaxDeliver + 1,
		Headers:  headerCarrier(m.Headers),
		Position: fmt.Sprintf("queue %s, dead-lettered (%s)", c.cfg.Queue, why),
		Attributes: []attribute.KeyValue{
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.destination.name", c.cfg.DeadLetterQueue),
		},
		Settle: func(_ context.Context, v intake.Verdict) error {
			if v.Settle == intake.SettleRetry {
				return nil // left unacked: it goes back to the dead-letter queue with the connection
			}
			settled = true
			c.stats.deadLetters.Add(1)
			return m.Ack(false)
		},
	}, captured, detail)
	return settled
}

// deathTime is when the broker last dead-lettered the message (the first
// x-death entry's time, else what a renewal kept of it).
func deathTime(h amqp.Table) (time.Time, bool) {
	if deaths, ok := h["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			if at, ok := t["time"].(time.Time); ok {
				return at, true
			}
		}
	}
	at, ok := h[deathTimeHeader].(time.Time)
	return at, ok
}

// deathReason is the broker's reason of the latest dead-lettering
// (x-first-death-reason, else the first x-death entry): expired,
// delivery_limit, rejected or maxlen.
func deathReason(h amqp.Table) string {
	if deaths, ok := h["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			if r, ok := t["reason"].(string); ok {
				return r
			}
		}
	}
	if r, ok := h["x-first-death-reason"].(string); ok {
		return r
	}
	if r, ok := h[deathHeader].(string); ok {
		return r
	}
	return "unknown"
}
