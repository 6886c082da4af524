package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/outbox"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestOutboxRelayPublishesOrderPaidOnce takes a message from JetStream to a
// charge, whose transaction writes order.paid to the outbox; the relay
// publishes it. Then the relay's mark is lost twice (the crash between
// publish and mark): inside the duplicate window the broker recognises the
// repeat, after it the stream holds a second copy and a downstream consumer
// keyed by event ID recognises it. Every way round, the event is seen once.
func TestOutboxRelayPublishesOrderPaidOnce(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{Duplicates: 2 * time.Second})
	s.StartProcess(t, j, j.ConsumerConfig(t, 5*time.Second, 5), intake.DispatcherConfig{})
	relay, err := outbox.New(s.Store, j.Publisher(), j.RelayConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	raw := order("evt_paid", 501, "pm_card_visa")
	j.Publish(t, raw, msgID(t, raw))
	if st := waitStarted(t, s, "evt_paid"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	eventID := store.OrderPaidEventID("evt_paid")
	published := func() bool {
		n, err := s.Store.OutboxUnpublished(ctx)
		return err == nil && n == 0
	}
	testenv.Eventually(t, 10*time.Second, "order.paid to be published", published)
	// order.paid and the receipt's outcome event, receipt.sent.
	if st := relay.Stats(); st.Published != 2 || st.Duplicates != 0 {
		t.Fatalf("relay stats = %+v", st)
	}

	// The mark is lost: the relay publishes again, inside the window.
	unmark := func() {
		t.Helper()
		if _, err := s.Store.Pool().Exec(ctx, `UPDATE outbox SET published_at = NULL WHERE event_id = $1`, eventID); err != nil {
			t.Fatal(err)
		}
	}
	unmark()
	testenv.Eventually(t, 10*time.Second, "the repeat to be published", func() bool { return relay.Stats().Duplicates == 1 })
	testenv.Eventually(t, 10*time.Second, "the repeat to be marked", published)
	events, err := j.JS.Stream(ctx, j.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := events.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("events stream holds %v messages (%v), want 2 (order.paid, receipt.sent): the broker stored a repeat", info.State.Msgs, err)
	}

	// The mark is lost again, after the duplicate window: a second copy.
	time.Sleep(2100 * time.Millisecond) // let the broker's 2s window pass; not an assertion
	unmark()
	testenv.Eventually(t, 10*time.Second, "the late repeat to be published", func() bool { return relay.Stats().Published == 3 })

	// A downstream consumer that records event IDs in its own inbox.
	cons, err := j.JS.OrderedConsumer(ctx, j.EventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{j.EventsPrefix + ".order.paid"}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var copies, firsts int
	for msg := range batch.Messages() {
		copies++
		if msg.Subject() != j.EventsPrefix+".order.paid" || msg.Headers().Get(nats.MsgIdHdr) != eventID {
			t.Errorf("event on %s with Nats-Msg-Id %q", msg.Subject(), msg.Headers().Get(nats.MsgIdHdr))
		}
		var ev struct {
			Type      string `json:"type"`
			OrderID   int64  `json:"order_id"`
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal(msg.Data(), &ev); err != nil || ev.Type != "order.paid" || ev.OrderID != 501 || ev.MessageID != "evt_paid" {
			t.Errorf("event payload %s: %v", msg.Data(), err)
		}
		row, err := s.Store.InsertInbox(ctx, store.InboxEntry{
			Consumer: "order-paid-audit", MessageID: msg.Headers().Get(nats.MsgIdHdr), Payload: msg.Data(), PayloadHash: "event", Source: "test",
		})
		if err != nil {
			t.Fatal(err)
		}
		if row.Inserted {
			firsts++
		}
	}
	if copies != 2 || firsts != 1 {
		t.Errorf("downstream saw %d copies and %d new events; want 2 copies, 1 event", copies, firsts)
	}
}
