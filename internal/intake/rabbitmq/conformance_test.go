package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
	"github.com/effectively/effectively/tools/sourcetest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestConformance runs the source conformance suite against RabbitMQ, on
// a node of its own (so that a case can restart it), with queues of each
// case's own.
func TestConformance(t *testing.T) {
	sourcetest.Run(t, &rmqHarness{node: rabbittest.StartNode(t)})
}

type rmqHarness struct{ node *rabbittest.Node }

func (*rmqHarness) Name() string { return "rabbitmq" }

func (*rmqHarness) NA(c sourcetest.Case) string {
	if c == sourcetest.CaseOrdering {
		return "a quorum queue delivers in order to one consumer, but the consumer settles up to Handlers deliveries at once, so the inbox does not keep the queue's order; the product does not promise it for RabbitMQ"
	}
	return ""
}

func (h *rmqHarness) NewSubscription(t testing.TB, o sourcetest.SubscriptionOptions) sourcetest.Subscription {
	t.Helper()
	cfg := rabbittest.Config(t, h.node.URL)
	cfg.MaxDeliver = o.MaxAttempts
	cfg.Prefetch = 5
	// A failed delivery is held 100 ms, then o.Redelivery, before it goes
	// back: at 100 ms throughout, postgres_down's outage used up the 50
	// deliveries in about 10 s, less than two rabbitmqctl calls took on a
	// loaded CI machine, and its messages were dead-lettered.
	cfg.RetryDelays = []time.Duration{100 * time.Millisecond, o.Redelivery}
	s := &rmqSub{node: h.node, cfg: cfg}
	s.pub = rabbitmq.NewPublisher(rabbitmq.PublisherConfig{URL: cfg.URL, Name: "conformance publisher",
		Declare: func(ch *amqp.Channel) error { return rabbitmq.Declare(ch, cfg) }})
	t.Cleanup(func() { _ = s.pub.Close() })
	// Declared before the first publish, so that no message is unroutable.
	if err := rabbitmq.Declare(rabbittest.Channel(t, cfg.URL), cfg); err != nil {
		t.Fatal(err)
	}
	// A consume before the new quorum queue's leader is elected fails
	// (541); the workers would retry, but the two-worker case wants both
	// consuming from the start.
	ready := rabbittest.Dial(t, cfg.URL)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch, err := ready.Channel()
		if err == nil {
			if _, err = ch.Consume(cfg.Queue, "ready", false, false, false, false, nil); err == nil {
				_ = ch.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s does not accept a consumer: %v", cfg.Queue, err)
		}
		if ready.IsClosed() {
			ready = rabbittest.Dial(t, cfg.URL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

type rmqSub struct {
	node *rabbittest.Node
	cfg  rabbitmq.Config
	pub  *rabbitmq.Publisher
}

// Publish publishes with confirms: a message the broker returned or did
// not confirm is an error (the suite retries it).
func (s *rmqSub) Publish(_ testing.TB, raw []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.pub.Publish(ctx, []rabbitmq.Outgoing{{Exchange: s.cfg.Exchange, RoutingKey: "order.placed", Body: raw}})
	return err
}

func (s *rmqSub) NewWorker(t testing.TB, in *intake.Intake, o sourcetest.WorkerOptions) sourcetest.Worker {
	t.Helper()
	cfg := s.cfg
	cfg.Logger = testenv.Logger(t)
	c, err := rabbitmq.NewConsumer(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &rmqWorker{Consumer: c, crash: rabbitmq.Crashable(c)}
	if o.LoseSettles {
		rabbitmq.LoseSettles(c)
	}
	return w
}

func (s *rmqSub) RestartBroker(testing.TB) { s.node.Restart() }

// Unsettled counts the queue's messages, ready and unacked, and the dead
// letters not yet quarantined.
func (s *rmqSub) Unsettled(testing.TB) int {
	q, dead := s.node.Messages(s.cfg.Queue), s.node.Messages(s.cfg.DeadLetterQueue)
	if q < 0 || dead < 0 {
		return -1
	}
	return q + dead
}

// rmqWorker is a Consumer whose connections Crash closes at once.
type rmqWorker struct {
	*rabbitmq.Consumer
	crash  func()
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (w *rmqWorker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	return w.Consumer.Run(ctx)
}

func (w *rmqWorker) Crash() {
	w.crash()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}
