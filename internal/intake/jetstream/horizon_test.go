package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/retention"
)

// TestHorizonIsReadFromTheBroker reads the source's horizon from the
// consumer as the broker holds it: the configured one first, then after an
// operator changed the durable to redeliver without limit (MaxDeliver -1),
// which has no horizon: the worker refuses to start with it.
func TestHorizonIsReadFromTheBroker(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := h.j.ConsumerConfig(t, 30*time.Second, 4)
	cons, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hz, err := cons.Horizon(ctx)
	if err != nil || hz.Source != jetstream.DefaultName || hz.Redelivery != 2*time.Minute || hz.DuplicateWindow != 2*time.Minute {
		t.Fatalf("horizon %+v, %v; want 4 × 30s of redelivery and the stream's 2m duplicate window", hz, err)
	}
	if _, err := h.j.JS.UpdateConsumer(ctx, h.j.Stream, natsjs.ConsumerConfig{
		Durable: cfg.Durable, FilterSubject: cfg.Subject, AckPolicy: natsjs.AckExplicitPolicy, AckWait: cfg.AckWait, MaxDeliver: -1,
	}); err != nil {
		t.Fatal(err)
	}
	if hz, err := cons.Horizon(ctx); !errors.Is(err, retention.ErrNoHorizon) {
		t.Fatalf("unlimited consumer: horizon %+v, err %v; want ErrNoHorizon", hz, err)
	}
}
