package jetstream_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/sourcetest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestConformance runs the source conformance suite against JetStream, on
// a nats-server of its own per case (so that it can be restarted).
func TestConformance(t *testing.T) { sourcetest.Run(t, jsHarness{}) }

// TestConformanceOfARouteConsumer runs the suite against a route's own
// consumer (NATS_CONSUMER_PER_ROUTE): the route's subject alone, beside a
// consumer of every subject that skips it.
func TestConformanceOfARouteConsumer(t *testing.T) { sourcetest.Run(t, jsHarness{route: true}) }

// TestConformanceOfARetiringConsumer runs the suite against a route's
// consumer left by NATS_CONSUMER_PER_ROUTE, read by a worker without it
// (jetstream.Retiring): it records what the durable holds the way the
// route's consumer would. Its checks are made every 100ms and never find
// the quiet that lets it delete the durable, which the suite's cases keep
// publishing to (its deletion: TestRetiring…).
func TestConformanceOfARetiringConsumer(t *testing.T) {
	restore := jetstream.SetRetire(100*time.Millisecond, math.MaxInt)
	t.Cleanup(restore)
	sourcetest.Run(t, jsHarness{route: true, retiring: true})
}

// natsConf has two users: worker, and lossy, whose acks the server drops
// (publish to $JS.ACK.> denied) while its connection stays up.
const natsConf = `
accounts {
  APP {
    jetstream: enabled
    users: [
      {user: worker, password: worker}
      {user: lossy, password: lossy, permissions: {publish: {deny: ["$JS.ACK.>"]}}}
    ]
  }
}
`

// jsHarness runs the JetStream consumer of every subject, or with route a
// route's consumer of its subject alone, or with retiring too that
// consumer's durable read by a Retiring.
type jsHarness struct{ route, retiring bool }

func (h jsHarness) Name() string {
	if h.route {
		return "jetstream-order-placed"
	}
	return "jetstream"
}

func (jsHarness) NA(c sourcetest.Case) string {
	if c == sourcetest.CaseOrdering {
		return "the consumer settles up to Handlers deliveries at once, so the inbox does not keep the stream's order; the product does not promise it for JetStream"
	}
	return ""
}

func (h jsHarness) NewSubscription(t testing.TB, o sourcetest.SubscriptionOptions) sourcetest.Subscription {
	t.Helper()
	s := &jsSub{srv: natstest.Start(t, natsConf), opts: o, route: h.route, retiring: h.retiring}
	s.nc, s.js = s.connect(t, "worker")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No size limit of the stream's own: an oversized message reaches the
	// consumer, as it does on an operator's loose stream (the streams the
	// worker creates refuse it at publish, TestCreatedStreamsRefuseOversizedMessages).
	if _, _, err := jetstream.EnsureStream(ctx, s.js, jetstream.StreamSpec{Name: "CONF", Subjects: []string{"conf.messages.>"}, MaxMsgSize: -1}); err != nil {
		t.Fatal(err)
	}
	return s
}

type jsSub struct {
	srv             *natstest.Server
	opts            sourcetest.SubscriptionOptions
	route, retiring bool
	nc              *nats.Conn
	js              natsjs.JetStream
}

func (s *jsSub) connect(t testing.TB, user string) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.srv.URL("nats", "127.0.0.1"), nats.UserInfo(user, user), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func (s *jsSub) Publish(_ testing.TB, raw []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.js.Publish(ctx, "conf.messages.order.placed", raw)
	return err
}

func (s *jsSub) NewWorker(t testing.TB, in *intake.Intake, o sourcetest.WorkerOptions) sourcetest.Worker {
	t.Helper()
	user := "worker"
	if o.LoseSettles {
		user = "lossy"
	}
	nc, js := s.connect(t, user)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.Config{
		Stream: "CONF", Subject: "conf.messages.>", Durable: "worker",
		AckWait: s.opts.Redelivery, MaxDeliver: s.opts.MaxAttempts, BackOff: []time.Duration{},
		FetchBatch: 5, FetchWait: time.Second, Logger: testenv.Logger(t),
	}
	if s.opts.LongPulls {
		cfg.FetchWait = 10 * time.Second // heartbeats every 5 s
	}
	if s.route {
		// The route's consumer, as the worker builds it beside the shared
		// one (which acks the route's subject without recording it).
		shared := cfg
		shared.Skip = []string{"conf.messages.order.placed"}
		if _, err := jetstream.NewConsumer(ctx, in, js, shared); err != nil {
			t.Fatal(err)
		}
		cfg.Name, cfg.Durable, cfg.Subject, cfg.StartAfter = "jetstream-order-placed", "worker-order-placed", "conf.messages.order.placed", "worker"
	}
	c, err := jetstream.NewConsumer(ctx, in, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.retiring {
		return &jsWorker{Source: c, nc: nc}
	}
	// The durable as the route's consumer left it, read by a worker
	// without the setting.
	r, err := jetstream.NewRetiring(ctx, in, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &jsWorker{Source: r, nc: nc}
}

func (s *jsSub) RestartBroker(t testing.TB) { s.srv.Restart(t) }

func (s *jsSub) Unsettled(testing.TB) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	durable := "worker"
	if s.route {
		durable = "worker-order-placed"
	}
	c, err := s.js.Consumer(ctx, "CONF", durable)
	if err != nil {
		return -1
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return -1
	}
	return ci.NumAckPending + int(ci.NumPending) //nolint:gosec // a test's few messages
}

// jsWorker is a Consumer (or a Retiring) on a connection of its own, which
// Crash closes.
type jsWorker struct {
	intake.Source
	nc     *nats.Conn
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (w *jsWorker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	return w.Source.Run(ctx)
}

func (w *jsWorker) Crash() {
	w.nc.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}
