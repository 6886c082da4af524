package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/intake/jetstream"
)

// Broker is the bench's hand on the broker a run goes through
// (Config.Broker): the run's own stream, topic or queue, the worker's
// environment for it, and the publishes of the e2e path and the duplicate
// burst. JetStream's is natsBroker; a new broker adds its own in newBroker.
type Broker interface {
	// Name is the broker's name in the report ("nats").
	Name() string
	// Version names the server and its version ("nats-server 2.10.x").
	Version() string
	// WorkerEnv selects the worker's source (EFFECTIVELY_SOURCES) and its
	// variables for this run.
	WorkerEnv() []string
	// NATSURL is the worker's NATS_URL: where its outbox relay publishes,
	// whatever the source ("off" for none).
	NATSURL() string
	// Publish publishes raw and waits for the broker's confirmation;
	// dedupID, when set, is the broker's publish dedup key (Nats-Msg-Id),
	// where it has one.
	Publish(ctx context.Context, raw []byte, dedupID string) error
	// PublishBurst publishes raws back to back, as fast as the broker takes
	// them, and returns once it confirmed every one.
	PublishBurst(ctx context.Context, raws [][]byte) error
	// Subscribed reports whether the worker's subscription exists (its
	// source has started).
	Subscribed(ctx context.Context) bool
	// Close removes what the run created and disconnects.
	Close()
}

// newBroker connects to cfg.Broker and creates the run's stream, topic or
// queue.
func newBroker(ctx context.Context, cfg Config) (Broker, error) {
	switch cfg.Broker {
	case "nats":
		return newNATSBroker(ctx, cfg.NATSURL)
	case "rabbitmq":
		return newRabbitBroker(ctx)
	case "kafka":
		return newKafkaBroker(ctx)
	}
	return nil, fmt.Errorf("bench: unknown broker %q: use nats, kafka or rabbitmq", cfg.Broker)
}

// natsBroker is a uniquely named stream pair on the NATS server, deleted at
// the end.
type natsBroker struct {
	url          string
	nc           *nats.Conn
	js           natsjs.JetStream
	stream       string
	subject      string // the publish subject of order.placed
	filter       string
	eventsStream string
	eventsPrefix string
}

func newNATSBroker(ctx context.Context, url string) (_ *natsBroker, err error) {
	b := &natsBroker{url: url}
	if b.nc, err = nats.Connect(url, nats.Name("effectively-bench")); err != nil {
		return nil, fmt.Errorf("NATS with JetStream is required at %s: %w", url, err)
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.js, err = natsjs.New(b.nc); err != nil {
		return nil, err
	}
	tag := "b" + randomTag(5)
	b.stream, b.filter = "BENCH_"+strings.ToUpper(tag), tag+".messages.>"
	b.eventsStream, b.eventsPrefix = b.stream+"_EVENTS", tag+".events"
	for _, spec := range []jetstream.StreamSpec{
		{Name: b.stream, Subjects: []string{b.filter}, MaxAge: time.Hour},
		{Name: b.eventsStream, Subjects: []string{b.eventsPrefix + ".>"}, MaxAge: time.Hour},
	} {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, created, err := jetstream.EnsureStream(sctx, b.js, spec)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", spec.Name, err)
		}
		if !created {
			return nil, fmt.Errorf("stream %s already existed", spec.Name)
		}
	}
	if b.subject, err = jetstream.PublishSubject(b.filter, "order.placed"); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *natsBroker) Name() string    { return "nats" }
func (b *natsBroker) Version() string { return "nats-server " + b.nc.ConnectedServerVersion() }
func (b *natsBroker) NATSURL() string { return b.url }

func (b *natsBroker) WorkerEnv() []string {
	return []string{
		"EFFECTIVELY_SOURCES=jetstream",
		"NATS_STREAM=" + b.stream, "NATS_SUBJECT=" + b.filter, "NATS_CONSUMER=bench",
		"NATS_EVENTS_STREAM=" + b.eventsStream, "NATS_EVENTS_PREFIX=" + b.eventsPrefix,
	}
}

func (b *natsBroker) Publish(ctx context.Context, raw []byte, dedupID string) error {
	var opts []natsjs.PublishOpt
	if dedupID != "" {
		opts = append(opts, natsjs.WithMsgID(dedupID))
	}
	_, err := b.js.Publish(ctx, b.subject, raw, opts...)
	return err
}

func (b *natsBroker) PublishBurst(_ context.Context, raws [][]byte) error {
	var firstErr error
	for _, raw := range raws {
		if _, err := b.js.PublishAsync(b.subject, raw); err != nil {
			// The async window is full: wait for acks, then go on.
			select {
			case <-b.js.PublishAsyncComplete():
			case <-time.After(10 * time.Second):
			}
			if _, err := b.js.PublishAsync(b.subject, raw); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return errors.New("publish acks did not arrive within 30s")
	}
	return firstErr
}

func (b *natsBroker) Subscribed(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := b.js.Consumer(cctx, b.stream, "bench")
	return err == nil
}

func (b *natsBroker) Close() {
	if b.js != nil {
		for _, name := range []string{b.stream, b.eventsStream} {
			if name == "" {
				continue
			}
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = b.js.DeleteStream(dctx, name)
			cancel()
		}
	}
	if b.nc != nil {
		b.nc.Close()
	}
}
