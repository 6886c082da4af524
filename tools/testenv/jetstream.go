package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
)

// NATSURL is the NATS server tests use: $TEST_NATS_URL, else
// nats://127.0.0.1:4222.
func NATSURL() string {
	if u := os.Getenv("TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// JetStream is a pair of uniquely named streams on the real NATS server, one
// for incoming messages and one for outgoing events, with subjects no other
// test uses. Both are deleted when the test ends, so tests never collide.
type JetStream struct {
	Conn *nats.Conn
	JS   natsjs.JetStream
	// Stream holds the messages; Subject is its filter (PREFIX.messages.>).
	Stream  string
	Subject string
	// EventsStream holds the events; EventsPrefix starts their subjects.
	EventsStream string
	EventsPrefix string
}

// JetStreamOptions adjusts the streams of NewJetStream.
type JetStreamOptions struct {
	// Duplicates is the publish deduplication window of both streams.
	// Default 2m.
	Duplicates time.Duration
	// MaxMsgSize is the largest message both streams store. Default
	// natsjs.MaxStreamMsgSize (internal/intake/jetstream), as the worker creates them; -1 for no limit
	// of the streams' own, as an operator's stream may have.
	MaxMsgSize int32
	// Replicas of both streams, on a cluster. Default 1.
	Replicas int
}

// NewJetStream connects to the NATS server and creates the test's streams.
// A server that does not answer fails the test: it is never skipped.
func NewJetStream(t testing.TB, o JetStreamOptions) *JetStream {
	t.Helper()
	return NewJetStreamAt(t, NATSURL(), o)
}

// NewJetStreamAt is NewJetStream on the server at url (one of the test's
// own, say, that it restarts); the connection reconnects for ever.
func NewJetStreamAt(t testing.TB, url string, o JetStreamOptions) *JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("effectively-test "+t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("testenv: NATS with JetStream is required for this test and did not answer at %s (TEST_NATS_URL): %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	tag := "t" + hex.EncodeToString(b[:])
	j := &JetStream{
		Conn: nc, JS: js,
		Stream: "TEST_" + strings.ToUpper(tag), Subject: tag + ".messages.>",
		EventsStream: "TEST_" + strings.ToUpper(tag) + "_EVENTS", EventsPrefix: tag + ".events",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, spec := range []jetstream.StreamSpec{
		{Name: j.Stream, Subjects: []string{j.Subject}, Duplicates: o.Duplicates, MaxAge: time.Hour, MaxMsgSize: o.MaxMsgSize, Replicas: o.Replicas},
		{Name: j.EventsStream, Subjects: []string{j.EventsPrefix + ".>"}, Duplicates: o.Duplicates, MaxAge: time.Hour, MaxMsgSize: o.MaxMsgSize, Replicas: o.Replicas},
	} {
		_, created, err := jetstream.EnsureStream(ctx, js, spec)
		if err != nil {
			t.Fatalf("testenv: create stream %s (is JetStream enabled on %s?): %v", spec.Name, url, err)
		}
		if !created {
			t.Fatalf("testenv: stream %s already existed", spec.Name)
		}
		t.Cleanup(func() {
			if nc.Status() != nats.CONNECTED {
				return // a test's own server, already stopped: nothing to delete
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, spec.Name); err != nil {
				t.Logf("testenv: delete stream %s: %v", spec.Name, err)
			}
		})
	}
	t.Cleanup(func() {
		// The dead-letter stream a consumer of the test's stream created.
		if nc.Status() != nats.CONNECTED {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, jetstream.DeadLetterStream(j.Stream)); err != nil && !errors.Is(err, natsjs.ErrStreamNotFound) {
			t.Logf("testenv: delete stream %s: %v", jetstream.DeadLetterStream(j.Stream), err)
		}
	})
	return j
}

// ConsumerConfig is a consumer of the test's message stream with short
// waits: ackWait for every delivery, maxDeliver deliveries.
func (j *JetStream) ConsumerConfig(t testing.TB, ackWait time.Duration, maxDeliver int) jetstream.Config {
	return jetstream.Config{
		Stream: j.Stream, Subject: j.Subject, Durable: "worker",
		AckWait: ackWait, MaxDeliver: maxDeliver, BackOff: []time.Duration{},
		FetchWait: 200 * time.Millisecond, Logger: Logger(t),
	}
}

// RelayConfig is the configuration of an outbox relay for tests: short
// passes, the test's log.
func (j *JetStream) RelayConfig(t testing.TB) outbox.Config {
	return outbox.Config{Interval: 100 * time.Millisecond, Logger: Logger(t)}
}

// Publisher publishes outbox events to the test's events stream.
func (j *JetStream) Publisher() *outbox.JetStreamPublisher {
	return outbox.NewJetStreamPublisher(j.JS, outbox.JetStreamConfig{Stream: j.EventsStream, SubjectPrefix: j.EventsPrefix})
}

// Publish publishes raw on the test's message subject with Nats-Msg-Id
// msgID (none when empty) and returns the broker's ack.
func (j *JetStream) Publish(t testing.TB, raw []byte, msgID string) *natsjs.PubAck {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	subject, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	var opts []natsjs.PublishOpt
	if msgID != "" {
		opts = append(opts, natsjs.WithMsgID(msgID))
	}
	ack, err := j.JS.Publish(ctx, subject, raw, opts...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return ack
}

// Process is what one worker process runs besides the Temporal worker: a
// JetStream consumer and a dispatcher, each with its own Intake and
// Postgres pool, as a separate process would have.
type Process struct {
	Consumer   *jetstream.Consumer
	Dispatcher *intake.Dispatcher
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	once       sync.Once
}

// StartProcess starts a consumer with cfg and a dispatcher with dcfg
// against the stack's database and Temporal, stopped when t ends.
func (s *Stack) StartProcess(t testing.TB, j *JetStream, cfg jetstream.Config, dcfg intake.DispatcherConfig) *Process {
	t.Helper()
	return s.StartProcessWithMetrics(t, j, cfg, dcfg, nil)
}

// StartProcessWithMetrics is StartProcess with the intake counting its
// decisions into m, as the worker's does.
func (s *Stack) StartProcessWithMetrics(t testing.TB, j *JetStream, cfg jetstream.Config, dcfg intake.DispatcherConfig, m *metrics.Metrics) *Process {
	t.Helper()
	pool, err := store.Open(context.Background(), s.DBURL, store.PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	in, err := intake.New(store.New(pool), s.Client, intake.Config{TaskQueue: s.TaskQueue, Logger: Logger(t), EagerStart: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.Metrics == nil {
		cfg.Metrics = m
	}
	cons, err := jetstream.NewConsumer(ctx, in, j.JS, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if dcfg.Logger == nil {
		dcfg.Logger = Logger(t)
	}
	if dcfg.Interval == 0 {
		dcfg.Interval = 100 * time.Millisecond
	}
	disp, err := intake.NewDispatcher(in, dcfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &Process{Consumer: cons, Dispatcher: disp, cancel: cancel}
	p.wg.Go(func() { _ = cons.Run(ctx) })
	p.wg.Go(func() { _ = disp.Run(ctx) })
	t.Cleanup(p.Stop)
	return p
}

// Stop shuts the process down gracefully and waits for it.
func (p *Process) Stop() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
}

// Eventually polls cond every 50ms until it holds or timeout passes, then
// fails the test with what.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
