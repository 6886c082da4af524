package e2e

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// brokerEnv points a worker process at the test's streams, with a short ack
// wait so a delivery the killed worker never acked comes back quickly.
func brokerEnv(j *testenv.JetStream) []string {
	return []string{
		"NATS_STREAM=" + j.Stream, "NATS_SUBJECT=" + j.Subject, "NATS_CONSUMER=worker",
		"NATS_ACK_WAIT=2s", "NATS_BACKOFF=none", "NATS_MAX_DELIVER=5",
		"NATS_EVENTS_STREAM=" + j.EventsStream, "NATS_EVENTS_PREFIX=" + j.EventsPrefix,
	}
}

// TestCrashWindowsAtBroker kills the real worker, consuming from JetStream,
// after the inbox insert but before the broker ack, and after the outbox
// publish but before the row is marked: the redelivery is recognised and the
// republish is dropped by the broker, so each message has one workflow, one
// charge and one order.paid event. It runs with the one consumer, and with a
// consumer per route whose deliveries wait for room before their insert
// (NATS_ROUTE_BACKLOG_WAITS, issue 24).
func TestCrashWindowsAtBroker(t *testing.T) {
	layouts := []struct {
		name, source string
		env          []string
	}{
		{"one-consumer", "jetstream", []string{"NATS_CONSUMER_PER_ROUTE=false"}},
		{"per-route-waits", "jetstream-order-placed", nil}, // the default: NATS_CONSUMER_PER_ROUTE and NATS_ROUTE_BACKLOG_WAITS on
	}
	for _, layout := range layouts {
		for _, point := range []string{failpoint.IntakeAfterInsert, failpoint.OutboxAfterPublish} {
			t.Run(layout.name+"/"+point, func(t *testing.T) {
				t.Parallel()
				crashAtBroker(t, point, layout.source, layout.env)
			})
		}
	}
}

// crashAtBroker is one case of TestCrashWindowsAtBroker: the worker killed
// at point, its message's inbox row recorded by source.
func crashAtBroker(t *testing.T, point, source string, env []string) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = testenv.NATSURL()
	s.cfg.Extra = append(append(s.cfg.Extra, brokerEnv(j)...), env...)
	first := s.start(t, failpoint.EnvVar+"="+point)

	id := "evt_broker_" + map[string]string{failpoint.IntakeAfterInsert: "insert", failpoint.OutboxAfterPublish: "publish"}[point]
	j.Publish(t, order(id, 88, "pm_card_visa"), "")
	killedAt(t, first, point)

	s.start(t) // restarted, no failpoint
	if st := s.waitOutcome(t, id); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	if n := workflowsFor(t, s.client, id); n != 1 {
		t.Errorf("workflows = %d, want 1", n)
	}
	if n := s.sims.Stripe.Stats().ChargesByMessage[id]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	ctx := context.Background()
	ms, err := s.store.Status(ctx, message.ConsumerOrderPlaced, id)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Inbox == nil || ms.Inbox.Source != source || ms.Processed == nil || ms.Processed.Outcome != store.OutcomePaid {
		t.Fatalf("postgres: inbox %+v processed %+v", ms.Inbox, ms.Processed)
	}
	if point == failpoint.IntakeAfterInsert && ms.Inbox.Duplicates < 1 {
		t.Errorf("the redelivery was not seen by the inbox (duplicates = %d)", ms.Inbox.Duplicates)
	}
	// Exactly one order.paid event in the events stream, one
	// receipt.sent (the outcome events), and the outbox rows marked.
	testenv.Eventually(t, 30*time.Second, "outbox rows published", func() bool {
		var published bool
		err := s.store.Pool().QueryRow(ctx, `SELECT published_at IS NOT NULL FROM outbox WHERE event_id = $1`, store.OrderPaidEventID(id)).Scan(&published)
		n, uerr := s.store.OutboxUnpublished(ctx)
		return err == nil && published && uerr == nil && n == 0
	})
	stream, err := j.JS.Stream(ctx, j.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(j.EventsPrefix+".>"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{j.EventsPrefix + ".order.paid": 1, j.EventsPrefix + ".receipt.sent": 1}
	if info.State.Msgs != 2 || !maps.Equal(info.State.Subjects, want) {
		t.Errorf("events in the stream = %d by subject %v, want %v", info.State.Msgs, info.State.Subjects, want)
	}
}

// TestCrashHoldingTheLastDelivery kills the real worker while it holds a
// message's last delivery (NATS_MAX_DELIVER=1), before anything of it is
// recorded. JetStream delivers it no more; the restarted worker reads the
// broker's max-delivery advisory from the dead-letter stream and records
// the message: it is charged once. Without the dead letters it stayed in
// the stream, unrecorded, and nothing said so.
func TestCrashHoldingTheLastDelivery(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = testenv.NATSURL()
	s.cfg.Extra = append(append(s.cfg.Extra, brokerEnv(j)...), "NATS_MAX_DELIVER=1")
	first := s.start(t, failpoint.EnvVar+"="+failpoint.IntakeBeforeInsert)

	const id = "evt_broker_last"
	j.Publish(t, order(id, 89, "pm_card_visa"), "")
	killedAt(t, first, failpoint.IntakeBeforeInsert)

	s.start(t)
	if st := s.waitOutcome(t, id); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	if n := s.sims.Stripe.Stats().ChargesByMessage[id]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	ms, err := s.store.Status(context.Background(), message.ConsumerOrderPlaced, id)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Inbox == nil || ms.Processed == nil || ms.Processed.Outcome != store.OutcomePaid {
		t.Fatalf("postgres: inbox %+v processed %+v", ms.Inbox, ms.Processed)
	}
	if n := len(ms.Quarantine); n != 0 {
		t.Errorf("%d quarantine rows, want none", n)
	}
}
