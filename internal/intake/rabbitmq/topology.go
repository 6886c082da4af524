package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial connects to url with a connection name the broker shows, and with
// no amqp091 Recovery: a recovered channel restarts its delivery tags at 1,
// so an ack from before the reconnect could settle a newer message. Callers
// reconnect themselves, with a new channel and a new generation.
func Dial(url, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	dial := amqp.DefaultDial(10 * time.Second)
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props, Heartbeat: 10 * time.Second, Dial: func(network, addr string) (net.Conn, error) {
		c, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		return &firmDeadline{Conn: c}, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("connect to rabbitmq %s: %w", redact(url), err)
	}
	return conn, nil
}

// firmDeadline keeps a deadline set with SetDeadline (CloseDeadline's)
// from being pushed back: amqp091 moves the read deadline 3 heartbeats
// ahead on every frame it reads, so a broker that sends heartbeats but
// never answers the close would hold Close past its deadline.
type firmDeadline struct {
	net.Conn
	mu   sync.Mutex
	firm time.Time
}

func (c *firmDeadline) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.firm = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *firmDeadline) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if !c.firm.IsZero() && (t.IsZero() || t.After(c.firm)) {
		t = c.firm
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// redact hides the password of an amqp URL.
func redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return url
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":***@" + rest[at+1:]
}

// Declare declares the topology c describes on ch: the topic exchange, the
// quorum queue bound to it with "#" (a message TTL, a delivery limit, the
// at-least-once dead-letter strategy with reject-publish overflow), and the
// dead-letter exchange and queue. Declaring is idempotent; a queue that
// exists with other arguments is refused with the broker's reason (and ch
// is closed by the broker).
func Declare(ch *amqp.Channel, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c = c.withDefaults()
	if err := ch.ExchangeDeclare(c.DeadLetterExchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare dead-letter exchange %s: %w", c.DeadLetterExchange, err)
	}
	if _, err := ch.QueueDeclare(c.DeadLetterQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare dead-letter queue %s: %w", c.DeadLetterQueue, explainInequivalent(err))
	}
	if err := ch.QueueBind(c.DeadLetterQueue, c.DeadLetterQueue, c.DeadLetterExchange, false, nil); err != nil {
		return fmt.Errorf("bind dead-letter queue %s: %w", c.DeadLetterQueue, err)
	}
	if err := ch.ExchangeDeclare(c.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", c.Exchange, err)
	}
	if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, c.queueArgs()); err != nil {
		return fmt.Errorf("declare queue %s: %w", c.Queue, explainInequivalent(err))
	}
	if err := ch.QueueBind(c.Queue, "#", c.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", c.Queue, c.Exchange, err)
	}
	return nil
}

// explainInequivalent adds what a 406 on declare means for the worker.
func explainInequivalent(err error) error {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return err
	}
	if strings.Contains(ae.Reason, "x-message-ttl") && strings.Contains(ae.Reason, "current is none") {
		return fmt.Errorf("%w: the existing queue has no x-message-ttl (%w)", ErrNoHorizon, err)
	}
	return fmt.Errorf("the existing queue was declared with other arguments (a quorum queue with the configured x-message-ttl, x-delivery-limit, x-dead-letter-exchange, x-dead-letter-strategy=at-least-once and x-overflow=reject-publish is required; `rabbitmqctl list_queues name arguments` shows them): %w", err)
}

// EventsTopology is where the outbox relay publishes: a topic exchange and
// a quorum queue bound to it with "#", so that no event is unroutable
// before a subscriber binds its own queue.
type EventsTopology struct {
	// Exchange receives the events, routing key = topic.
	Exchange string
	// Queue keeps every event; empty declares none (the publisher then
	// fails on an event no queue is bound for).
	Queue string
}

// Declare declares t on ch.
func (t EventsTopology) Declare(ch *amqp.Channel) error {
	if err := validName(t.Exchange); err != nil {
		return fmt.Errorf("events exchange: %w", err)
	}
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare events exchange %s: %w", t.Exchange, err)
	}
	if t.Queue == "" {
		return nil
	}
	if err := validName(t.Queue); err != nil {
		return fmt.Errorf("events queue: %w", err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare events queue %s: %w", t.Queue, explainInequivalent(err))
	}
	if err := ch.QueueBind(t.Queue, "#", t.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind events queue %s: %w", t.Queue, err)
	}
	return nil
}

// Remove deletes queues, then exchanges, on conn, each on a channel of its
// own (a missing one fails alone and is skipped), within SetupTimeout or
// ctx: the cleanup of a tool's or a test's own topology.
func Remove(ctx context.Context, conn *amqp.Connection, queues, exchanges []string) error {
	return Bounded(ctx, conn, func() error {
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
		for _, x := range exchanges {
			if ch, err := conn.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				_ = ch.Close()
			}
		}
		return nil
	})
}
