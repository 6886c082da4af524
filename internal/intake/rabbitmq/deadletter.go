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
// delivery limit of its own).
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
			if !c.quarantineDeadLetter(ctx, m) {
				return nil
			}
		}
	}
}

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
// x-death entry's time).
func deathTime(h amqp.Table) (time.Time, bool) {
	if deaths, ok := h["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			at, ok := t["time"].(time.Time)
			return at, ok
		}
	}
	return time.Time{}, false
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
	return "unknown"
}
