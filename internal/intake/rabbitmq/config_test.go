package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/tools/rabbittest"
)

// TestHorizonIsTheMessageTTL: the source's horizon is the queue's TTL, and
// a configuration without one is refused, naming the reason.
func TestHorizonIsTheMessageTTL(t *testing.T) {
	h, err := rabbitmq.Config{MessageTTL: 36 * time.Hour}.Horizon()
	if err != nil || h != 36*time.Hour {
		t.Fatalf("Horizon = %s, %v; want 36h", h, err)
	}
	if h, err := (rabbitmq.Config{}).Horizon(); err != nil || h != rabbitmq.DefaultMessageTTL {
		t.Fatalf("default Horizon = %s, %v", h, err)
	}
	_, err = rabbitmq.Config{MessageTTL: -1}.Horizon()
	if !errors.Is(err, rabbitmq.ErrNoHorizon) || !strings.Contains(err.Error(), "no retention is safe") {
		t.Fatalf("no TTL: %v, want ErrNoHorizon", err)
	}
	if _, err := (rabbitmq.Config{MessageTTL: 60 * 24 * time.Hour}).Horizon(); err == nil || !strings.Contains(err.Error(), "x-message-ttl limit") {
		t.Fatalf("TTL beyond RabbitMQ's limit: %v", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	err := rabbitmq.Config{Queue: "amq.mine", MaxDeliver: -1, Prefetch: 70000}.Validate()
	for _, want := range []string{"Queue: name \"amq.mine\"", "MaxDeliver -1", "prefetch 70000 (Prefetch)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to mention %q", err, want)
		}
	}
}

// TestQueueWithoutTTLIsRefused: an existing queue declared by someone else
// without x-message-ttl has no horizon: Declare refuses it with
// ErrNoHorizon and the broker's reason, and consumes nothing.
func TestQueueWithoutTTLIsRefused(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	ch := rabbittest.Channel(t, cfg.URL)
	// Everything the worker declares but the TTL.
	if _, err := ch.QueueDeclare(cfg.Queue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int64(rabbitmq.DefaultMaxDeliver), "x-dead-letter-exchange": cfg.DeadLetterExchange,
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish", "x-dead-letter-routing-key": cfg.DeadLetterQueue,
	}); err != nil {
		t.Fatal(err)
	}
	ch2 := rabbittest.Channel(t, cfg.URL)
	err := rabbitmq.Declare(ch2, cfg)
	if !errors.Is(err, rabbitmq.ErrNoHorizon) || !strings.Contains(err.Error(), "x-message-ttl") {
		t.Fatalf("Declare over a queue without a TTL = %v, want ErrNoHorizon naming x-message-ttl", err)
	}
	// A plain quorum queue is refused on its first missing argument.
	cfg3 := rabbittest.Config(t, rabbittest.URL())
	if _, err := rabbittest.Channel(t, cfg3.URL).QueueDeclare(cfg3.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(rabbittest.Channel(t, cfg3.URL), cfg3); err == nil || !strings.Contains(err.Error(), "inequivalent arg") {
		t.Fatalf("Declare over a plain quorum queue = %v", err)
	}
	// Another delivery limit is refused too, with the broker's reason.
	cfg2 := rabbittest.Config(t, rabbittest.URL())
	if err := rabbitmq.Declare(rabbittest.Channel(t, cfg2.URL), cfg2); err != nil {
		t.Fatal(err)
	}
	cfg2.MaxDeliver = 9
	err = rabbitmq.Declare(rabbittest.Channel(t, cfg2.URL), cfg2)
	if err == nil || errors.Is(err, rabbitmq.ErrNoHorizon) || !strings.Contains(err.Error(), "x-delivery-limit") {
		t.Fatalf("Declare with another delivery limit = %v", err)
	}
}

// TestGlobalQoSKillsTheConnection is the trap the consumer avoids with a
// per-channel prefetch: on a quorum queue, basic.qos global=true then
// consume is refused with 540 NOT_IMPLEMENTED and closes the connection.
func TestGlobalQoSKillsTheConnection(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	conn := rabbittest.Dial(t, cfg.URL)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ch, cfg); err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(10, 0, true); err != nil {
		t.Fatal(err)
	}
	_, _ = ch.Consume(cfg.Queue, "", false, false, false, false, nil)
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.NotImplemented {
			t.Fatalf("connection closed with %v, want 540", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("global QoS on a quorum queue did not close the connection (server behaviour changed?)")
	}
}

// TestSourceHorizon: the source's horizon is read by declaring on the
// broker; a configuration without a TTL is refused as retention.ErrNoHorizon.
func TestSourceHorizon(t *testing.T) {
	f := newFixture(t, rabbittest.URL(), func(c *rabbitmq.Config) { c.MessageTTL = 48 * time.Hour })
	c, err := rabbitmq.NewConsumer(f.in, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Horizon(context.Background())
	if err != nil || h.Redelivery != 48*time.Hour || h.Source != "rabbitmq" || !strings.Contains(h.Basis, f.cfg.Queue) {
		t.Fatalf("Horizon = %+v, %v", h, err)
	}
	noTTL := f.cfg
	noTTL.MessageTTL = -1
	if _, err := rabbitmq.NewConsumer(f.in, noTTL); !errors.Is(err, retention.ErrNoHorizon) {
		t.Fatalf("NewConsumer without a TTL = %v, want retention.ErrNoHorizon", err)
	}
	// The broker's queue has another TTL than configured: refused.
	other := f.cfg
	other.MessageTTL = time.Hour
	c2, err := rabbitmq.NewConsumer(f.in, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Horizon(context.Background()); err == nil || !strings.Contains(err.Error(), "x-message-ttl") {
		t.Fatalf("Horizon over a queue with another TTL = %v", err)
	}
}
