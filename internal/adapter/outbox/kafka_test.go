package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/kafkatest"
	"github.com/effectively/effectively/tools/storetest"
)

const paidTopic = "effectively.events.order.paid"

func writeEvents(t *testing.T, st *store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := st.Pool().Exec(context.Background(),
			`INSERT INTO outbox (event_id, topic, payload) VALUES ($1, 'order.paid', $2::jsonb)`,
			id, fmt.Sprintf(`{"event_id": %q}`, id)); err != nil {
			t.Fatal(err)
		}
	}
}

func newRelay(t *testing.T, st *store.Store, addr string, timeout time.Duration) *outbox.Relay {
	t.Helper()
	p, err := outbox.NewKafkaPublisher(kafkatest.Producer(t, addr), outbox.KafkaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.New(st, p, outbox.Config{PublishTimeout: timeout, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func consumeAll(t *testing.T, addr string, n int) []*kgo.Record {
	t.Helper()
	cl := kafkatest.Producer(t, addr, kgo.ConsumeTopics(paidTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records, want %d", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func unpublished(t *testing.T, st *store.Store) int {
	t.Helper()
	n, err := st.OutboxUnpublished(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Each event becomes a record keyed by its ID, with the ID and (tracing
// on) a traceparent in its headers, and its row is marked only once the broker
// stored it.
func TestKafkaPublisherRelaysTheOutbox(t *testing.T) {
	tracing.Install(sdktrace.NewTracerProvider())
	t.Cleanup(func() { tracing.Install(noop.NewTracerProvider()) })
	_, addr := kafkatest.NewCluster(t)
	kafkatest.CreateTopic(t, addr, paidTopic, 2, nil)
	st := store.New(storetest.NewPool(t))
	writeEvents(t, st, "evt_o1", "evt_o2", "evt_o3")
	n, err := newRelay(t, st, addr, 5*time.Second).RelayPending(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("relayed %d, %v; want 3", n, err)
	}
	if u := unpublished(t, st); u != 0 {
		t.Fatalf("%d rows left unpublished", u)
	}
	got := map[string]bool{}
	for _, r := range consumeAll(t, addr, 3) {
		var header, traceparent string
		for _, h := range r.Headers {
			switch h.Key {
			case outbox.EventIDHeader:
				header = string(h.Value)
			case "traceparent":
				traceparent = string(h.Value)
			}
		}
		if string(r.Key) != header || header == "" {
			t.Fatalf("record key %q, event_id header %q: want both the event ID", r.Key, header)
		}
		if len(traceparent) != 55 {
			t.Fatalf("traceparent header %q, want a W3C traceparent", traceparent)
		}
		got[header] = true
	}
	if len(got) != 3 {
		t.Fatalf("events on the topic: %v", got)
	}
}

// With the broker down nothing is marked published; once it is back the
// same rows are published.
func TestKafkaPublisherWaitsForTheBroker(t *testing.T) {
	proc := kafkatest.StartProcess(t, 1, paidTopic)
	st := store.New(storetest.NewPool(t))
	writeEvents(t, st, "evt_d1", "evt_d2")
	relay := newRelay(t, st, proc.Addr(), 2*time.Second)
	proc.Kill(t)
	n, err := relay.RelayPending(context.Background())
	if err == nil || n != 0 {
		t.Fatalf("relay with the broker down: %d marked, error %v; want 0 and an error", n, err)
	}
	if u := unpublished(t, st); u != 2 {
		t.Fatalf("%d rows unpublished, want 2", u)
	}
	proc.Restart(t)
	deadline := time.Now().Add(30 * time.Second)
	for unpublished(t, st) > 0 && time.Now().Before(deadline) {
		_, _ = relay.RelayPending(context.Background())
		time.Sleep(time.Second) // the failed rows' lease
	}
	if u := unpublished(t, st); u != 0 {
		t.Fatalf("%d rows unpublished after the broker came back", u)
	}
	if rs := consumeAll(t, proc.Addr(), 2); len(rs) != 2 {
		t.Fatalf("%d records, want 2", len(rs))
	}
}
