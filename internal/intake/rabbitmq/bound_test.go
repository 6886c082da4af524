package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
	"github.com/effectively/effectively/tools/testenv"
)

// The tests below put a rabbittest.Mute between the client and the broker:
// it swallows one method, so the broker, up and sending heartbeats, never
// answers it. Each call that waits for that answer must end within its
// bound; before the bounds, each of them waited for ever.

const setupBound = time.Second

// within runs f and fails t when it has not returned after limit.
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s", what, limit)
		var zero T
		return zero
	}
}

// TestPublisherSetupIsBounded: the broker never answers the publisher's
// confirm.select. The publish fails within the setup bound, saying why,
// and the next one, answered, reconnects and is stored.
func TestPublisherSetupIsBounded(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	mute := rabbittest.StartMute(t, cfg.URL)
	mute.Swallow(rabbittest.ConfirmSelect)
	topo := rabbitmq.EventsTopology{Exchange: cfg.Exchange, Queue: cfg.Queue}
	p := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: mute.URL, Declare: topo.Declare, SetupTimeout: setupBound})
	defer p.Close()
	msg := []rabbitmq.Outgoing{{Exchange: cfg.Exchange, RoutingKey: "order.paid", MessageID: "evt_muted", Body: []byte("{}")}}
	err := within(t, setupBound+5*time.Second, "Publish", func() error {
		_, err := p.Publish(context.Background(), msg)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no answer from the broker") {
		t.Fatalf("Publish with confirm.select unanswered = %v, want the setup's timeout", err)
	}
	if mute.Swallowed() == 0 {
		t.Fatal("the mute swallowed nothing: the test did not leave a call unanswered")
	}
	mute.Pass()
	if _, err := p.Publish(context.Background(), msg); err != nil {
		t.Fatalf("Publish once answered: %v", err)
	}
	if n := queueDepth(t, rabbittest.URL(), cfg.Queue); n != 1 {
		t.Fatalf("queue holds %d, want the one message", n)
	}
}

// TestPublisherSetupEndsWithItsContext: the publish's context ends while
// the broker has not answered channel.open; Publish returns at once.
func TestPublisherSetupEndsWithItsContext(t *testing.T) {
	mute := rabbittest.StartMute(t, rabbittest.URL())
	mute.Swallow(rabbittest.ChannelOpen)
	p := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: mute.URL})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := within(t, 5*time.Second, "Publish", func() error {
		_, err := p.Publish(ctx, []rabbitmq.Outgoing{{Exchange: "amq.topic", RoutingKey: "x", MessageID: "m", Body: []byte("{}")}})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("Publish = %v, want it ended with its context", err)
	}
}

// TestCloseIsBounded: the broker never answers connection.close. The
// publisher's Close returns within CloseTimeout.
func TestCloseIsBounded(t *testing.T) {
	mute := rabbittest.StartMute(t, rabbittest.URL())
	p := rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: mute.URL})
	if _, err := p.Publish(context.Background(), []rabbitmq.Outgoing{{Exchange: "amq.topic", RoutingKey: "nowhere", MessageID: "m", Body: []byte("{}")}}); err == nil {
		t.Fatal("a message no queue is bound for was stored")
	}
	mute.Swallow(rabbittest.ConnectionClose)
	// The close's error says the deadline passed; only its return counts.
	_ = within(t, rabbitmq.CloseTimeout+3*time.Second, "Close", func() error { return p.Close() })
	if mute.Swallowed() == 0 {
		t.Fatal("the mute swallowed nothing")
	}
}

// TestHorizonCheckIsBounded: the worker's start-up check of the queue's
// TTL declares the queue; unanswered, it fails within the setup bound
// with the source's name instead of holding the worker's start.
func TestHorizonCheckIsBounded(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	mute := rabbittest.StartMute(t, f.cfg.URL)
	mute.Swallow(rabbittest.QueueDeclare)
	cfg := f.cfg
	cfg.URL, cfg.SetupTimeout = mute.URL, setupBound
	c, err := rabbitmq.NewConsumer(f.in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = within(t, setupBound+5*time.Second, "Horizon", func() error {
		_, err := c.Horizon(context.Background())
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no answer from the broker") || !strings.Contains(err.Error(), "source "+cfg.Name) {
		t.Fatalf("Horizon with queue.declare unanswered = %v, want the source's setup timeout", err)
	}
}

// TestUnansweredConsumeIsRetriedAndCounted: the broker leaves the
// consumer's basic.consume unanswered (what 3.10.8 did after a node kill).
// The consumer gives each attempt up within the bound, counts it in
// effectively_source_setup_timeouts_total, and once the broker answers it
// consumes: a message published meanwhile is recorded. A stop while the
// call is pending returns at once.
func TestUnansweredConsumeIsRetriedAndCounted(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	mute := rabbittest.StartMute(t, f.cfg.URL)
	mute.Swallow(rabbittest.BasicConsume)
	reg := prometheus.NewRegistry()
	cfg := f.cfg
	cfg.URL, cfg.SetupTimeout, cfg.Metrics = mute.URL, setupBound, metrics.New(reg)
	c, stop := f.run(t, cfg, nil)
	timeouts := func() float64 {
		return testenv.CounterSum(t, reg, metrics.NameSetupTimeouts, map[string]string{"source": c.Name()})
	}
	// The main queue's session and the dead-letter queue's each count.
	eventually(t, "two setup timeouts counted", func() bool { return timeouts() >= 2 })
	if c.Check().Fn(context.Background()) == nil {
		t.Error("ready while its consume is unanswered")
	}
	f.publish(t, order("evt_while_muted", 1))
	mute.Pass()
	eventually(t, "the message recorded once the broker answers", func() bool {
		return f.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_while_muted'`) == 1
	})
	if err := c.Check().Fn(context.Background()); err != nil {
		t.Errorf("not ready once consuming: %v", err)
	}
	stop()

	// Stopped while the consume is pending, long before its bound: Run
	// returns at once, and the stop is not counted as a timeout.
	mute.Swallow(rabbittest.BasicConsume)
	before, swallowed := timeouts(), mute.Swallowed()
	cfg.SetupTimeout = time.Minute
	_, stop = f.run(t, cfg, nil)
	eventually(t, "a consume swallowed", func() bool { return mute.Swallowed() > swallowed })
	within(t, 3*time.Second, "Run's stop", func() bool { stop(); return true })
	if after := timeouts(); after != before {
		t.Errorf("the stop counted %v timeouts", after-before)
	}
}

// TestUnansweredCancelEndsTheShutdown: on shutdown the consumer cancels
// its consume and waits for the broker's cancel-ok before it settles what
// it received. A broker that never sends it does not hold Run: past
// CloseTimeout the connection is closed and Run returns.
func TestUnansweredCancelEndsTheShutdown(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	mute := rabbittest.StartMute(t, f.cfg.URL)
	cfg := f.cfg
	cfg.URL = mute.URL
	c, stop := f.run(t, cfg, nil)
	eventually(t, "consuming", func() bool { return c.Check().Fn(context.Background()) == nil })
	f.publish(t, order("evt_before_stop", 1))
	eventually(t, "the message recorded", func() bool {
		return f.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_before_stop'`) == 1
	})
	mute.Swallow(rabbittest.BasicCancel)
	within(t, rabbitmq.CloseTimeout+5*time.Second, "Run's stop", func() bool { stop(); return true })
	if mute.Swallowed() == 0 {
		t.Fatal("the mute swallowed nothing")
	}
	if n := f.count(t, `SELECT count(*) FROM inbox`); n != 1 {
		t.Fatalf("%d inbox rows, want 1", n)
	}
}

// TestBoundedEndsAnUnansweredCall: a dev tool's declarations through
// Bounded (devstack's, the bench's) end with their context when the
// broker never answers channel.open, and CloseConn then returns.
func TestBoundedEndsAnUnansweredCall(t *testing.T) {
	mute := rabbittest.StartMute(t, rabbittest.URL())
	mute.Swallow(rabbittest.ChannelOpen)
	conn, err := rabbitmq.Dial(mute.URL, "bounded test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = within(t, 5*time.Second, "Bounded", func() error {
		return rabbitmq.Bounded(ctx, conn, func() error {
			_, err := conn.Channel()
			return err
		})
	})
	if err == nil || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("Bounded = %v, want it ended with its context", err)
	}
	_ = within(t, rabbitmq.CloseTimeout+3*time.Second, "CloseConn", func() error { return rabbitmq.CloseConn(conn) })
}
