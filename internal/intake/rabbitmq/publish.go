package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// ErrReturned reports a publish the broker confirmed but returned: a
// mandatory message no queue is bound for. RabbitMQ acks it (ack=true) after
// the basic.return, so a confirm alone does not mean stored.
var ErrReturned = errors.New("returned by the broker: no queue is bound for its routing key")

// Outgoing is one message to publish.
type Outgoing struct {
	Exchange, RoutingKey string
	// MessageID goes in the message_id property: the event or message ID,
	// which every copy carries.
	MessageID string
	Body      []byte
	// Headers are sent as given; Publish adds the trace context of its ctx.
	Headers amqp.Table
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// URL of the broker. Default DefaultURL.
	URL string
	// Name is the connection name the broker shows. Default "effectively".
	Name string
	// Declare, when set, runs on each new channel (the topology to publish
	// into).
	Declare func(*amqp.Channel) error
	// ConfirmTimeout bounds the wait for each batch's confirms. Default 5s.
	ConfirmTimeout time.Duration
	// SetupTimeout bounds a new connection's setup (channel, Declare,
	// confirm mode). Default SetupTimeout.
	SetupTimeout time.Duration
}

// PublisherStats counts what a Publisher did.
type PublisherStats struct{ Published, Returned, Nacked, Failed int64 }

// Publisher publishes with publisher confirms on one channel, mandatory,
// persistent, and counts a returned message as failed. It reconnects on the
// next call after its connection closed. Safe for concurrent use; calls are
// serialised.
type Publisher struct {
	cfg     PublisherConfig
	mu      sync.Mutex
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	stats   struct{ published, returned, nacked, failed atomic.Int64 }
}

// NewPublisher returns a Publisher; it connects on its first call.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	if cfg.Name == "" {
		cfg.Name = "effectively"
	}
	if cfg.ConfirmTimeout <= 0 {
		cfg.ConfirmTimeout = 5 * time.Second
	}
	if cfg.SetupTimeout <= 0 {
		cfg.SetupTimeout = SetupTimeout
	}
	return &Publisher{cfg: cfg}
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{Published: p.stats.published.Load(), Returned: p.stats.returned.Load(), Nacked: p.stats.nacked.Load(), Failed: p.stats.failed.Load()}
}

// Close closes the connection, within CloseTimeout.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := CloseConn(p.conn)
	p.conn, p.ch = nil, nil
	return err
}

// open returns the channel, dialling a new connection when there is none
// or it closed; the setup ends within SetupTimeout or when ctx ends. Called
// with p.mu held.
func (p *Publisher) open(ctx context.Context) (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	if p.conn != nil {
		_ = CloseConn(p.conn)
		p.conn, p.ch = nil, nil
	}
	conn, err := Dial(p.cfg.URL, p.cfg.Name)
	if err != nil {
		return nil, err
	}
	fail := watchSetup(ctx, conn, p.cfg.SetupTimeout, nil)
	ch, err := conn.Channel()
	if err == nil && p.cfg.Declare != nil {
		err = p.cfg.Declare(ch)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err = fail(err); err != nil {
		_ = CloseConn(conn)
		return nil, fmt.Errorf("rabbitmq publisher channel: %w", err)
	}
	// Buffered beyond any batch: the reader goroutine delivers a return
	// before the ack that follows it, and must never block on us.
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 1024))
	// Drained so that the connection's close notification never blocks.
	go func(c chan *amqp.Error) {
		for range c {
		}
	}(conn.NotifyClose(make(chan *amqp.Error, 1)))
	p.conn, p.ch = conn, ch
	return ch, nil
}

// Publish publishes msgs and waits for their confirms. It returns, in
// order, whether each one is stored: confirmed (ack) and not returned. An
// error describes every message that is not; a message nacked, returned or
// unconfirmed when the channel closed is not stored and may be published
// again (the broker does no dedup: a consumer recognises the copy by its
// message ID).
func (p *Publisher) Publish(ctx context.Context, msgs []Outgoing) ([]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stored := make([]bool, len(msgs))
	if len(msgs) == 0 {
		return stored, nil
	}
	if len(msgs) > cap(p.returns) && p.returns != nil {
		return stored, fmt.Errorf("rabbitmq publish: batch of %d is larger than %d", len(msgs), cap(p.returns))
	}
	ch, err := p.open(ctx)
	if err != nil {
		p.stats.failed.Add(int64(len(msgs)))
		return stored, err
	}
	for len(p.returns) > 0 { // returns of an earlier call that timed out
		<-p.returns
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	confirms := make([]*amqp.DeferredConfirmation, len(msgs))
	var errs []error
	for i, m := range msgs {
		headers := amqp.Table{}
		for k, v := range m.Headers {
			headers[k] = v
		}
		tracing.Propagator.Inject(ctx, headerCarrier(headers))
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(cctx, m.Exchange, m.RoutingKey, true, false, amqp.Publishing{
			Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent,
			MessageId: m.MessageID, Timestamp: time.Now(), Body: m.Body,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("publish %s to %s/%s: %w", m.MessageID, m.Exchange, m.RoutingKey, err))
			break
		}
	}
	acked := make([]bool, len(msgs))
	for i, m := range msgs {
		dc := confirms[i]
		if dc == nil {
			continue
		}
		ok, err := dc.WaitContext(cctx)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("publish %s: no confirm: %w", m.MessageID, err))
		case !ok:
			p.stats.nacked.Add(1)
			errs = append(errs, fmt.Errorf("publish %s: nacked by the broker (or its channel closed)", m.MessageID))
		default:
			acked[i] = true
		}
	}
	// Every return precedes its message's ack on the wire, and the reader
	// goroutine hands it to p.returns before it resolves that confirm: by
	// now every return of this batch is buffered.
	returned := map[string]amqp.Return{}
	for len(p.returns) > 0 {
		r := <-p.returns
		returned[r.MessageId] = r
	}
	for i, m := range msgs {
		if !acked[i] {
			p.stats.failed.Add(1)
			continue
		}
		if r, ok := returned[m.MessageID]; ok {
			p.stats.returned.Add(1)
			errs = append(errs, fmt.Errorf("publish %s to %s/%s: %w (%d %s)", m.MessageID, m.Exchange, m.RoutingKey, ErrReturned, r.ReplyCode, r.ReplyText))
			continue
		}
		stored[i] = true
		p.stats.published.Add(1)
	}
	return stored, errors.Join(errs...)
}

// EventPublisher publishes outbox events to a topic exchange, routing key
// = topic, message_id = event ID (the broker does no dedup: a consumer
// recognises a repeat by it). It is the relay's outbox.Publisher.
type EventPublisher struct {
	pub      *Publisher
	exchange string
}

var _ outbox.Publisher = (*EventPublisher)(nil)

// NewEventPublisher returns an EventPublisher declaring t on connect.
func NewEventPublisher(url string, t EventsTopology) *EventPublisher {
	return &EventPublisher{
		pub:      NewPublisher(PublisherConfig{URL: url, Name: "effectively outbox relay", Declare: t.Declare}),
		exchange: t.Exchange,
	}
}

// Name is "rabbitmq".
func (p *EventPublisher) Name() string { return SourceRabbitMQ }

// Publish publishes e and returns nil only once the broker confirmed it
// and did not return it. RabbitMQ never reports a duplicate.
func (p *EventPublisher) Publish(ctx context.Context, e store.OutboxEvent) (bool, error) {
	_, err := p.pub.Publish(ctx, []Outgoing{{Exchange: p.exchange, RoutingKey: e.Topic, MessageID: e.EventID, Body: e.Payload}})
	return false, err
}

// Stats returns the publisher's counters.
func (p *EventPublisher) Stats() PublisherStats { return p.pub.Stats() }

// Close closes the connection.
func (p *EventPublisher) Close() error { return p.pub.Close() }
