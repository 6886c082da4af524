package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// msgID is the Nats-Msg-Id `starter publish` gives raw.
func msgID(t *testing.T, raw []byte) string {
	t.Helper()
	m, err := route.Default().Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return jetstream.MsgID(m)
}

// waitStarted waits for the message's workflow to exist (the consumer
// starts it asynchronously), then for its result.
func waitStarted(t *testing.T, s *testenv.Stack, messageID string) workflows.Status {
	t.Helper()
	wfID, err := identity.WorkflowID(message.ConsumerOrderPlaced, messageID)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "workflow "+wfID+" to start", func() bool {
		_, err := s.Client.DescribeWorkflow(context.Background(), wfID, "")
		return err == nil
	})
	return wait(t, s, messageID)
}

// TestJetStreamCopiesStartOneWorkflow publishes a message twice with its
// Nats-Msg-Id (the broker drops the copy), once more without one (the inbox
// must catch it), and simulates a worker that recorded the message and died
// before its ack: the redelivery after AckWait is recognised. One workflow,
// one charge.
func TestJetStreamCopiesStartOneWorkflow(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	cfg := j.ConsumerConfig(t, time.Second, 5)
	ctx := context.Background()
	// Create the durable consumer, as a worker's start does.
	if _, err := jetstream.NewConsumer(ctx, s.Intake, j.JS, cfg); err != nil {
		t.Fatal(err)
	}

	raw := order("evt_js1", 101, "pm_card_visa")
	if ack := j.Publish(t, raw, msgID(t, raw)); ack.Duplicate {
		t.Fatalf("first publish reported a duplicate")
	}
	if ack := j.Publish(t, raw, msgID(t, raw)); !ack.Duplicate {
		t.Fatalf("second publish with the same Nats-Msg-Id was stored again; want the broker to drop it")
	}

	// The crash: a worker fetches the message, records it, and dies before
	// the ack. Nothing started, nothing acked.
	cons, err := j.JS.Consumer(ctx, j.Stream, cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1)
	if err != nil {
		t.Fatal(err)
	}
	var fetched int
	for msg := range batch.Messages() {
		fetched++
		rec, err := s.Intake.Record(ctx, msg.Data(), jetstream.DefaultName)
		if err != nil || !rec.New || !rec.Pending {
			t.Fatalf("record before the crash = %+v, %v", rec, err)
		}
	}
	if fetched != 1 {
		t.Fatalf("fetched %d messages, want 1", fetched)
	}
	// A publisher that sets no Nats-Msg-Id: the broker cannot help.
	if ack := j.Publish(t, raw, ""); ack.Duplicate {
		t.Fatalf("publish without Nats-Msg-Id reported a duplicate")
	}

	// The next worker process.
	p := s.StartProcess(t, j, cfg, intake.DispatcherConfig{})
	if st := waitStarted(t, s, "evt_js1"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	testenv.Eventually(t, 20*time.Second, "the redelivered and the republished copy", func() bool {
		return p.Consumer.Stats().Duplicates >= 2
	})
	stats := p.Consumer.Stats()
	if stats.Recorded != 0 || stats.Duplicates != 2 || stats.Retries != 0 {
		t.Errorf("consumer stats = %+v; want 0 recorded (the crashed worker did), 2 duplicates", stats)
	}
	expectOnce(t, s, "evt_js1")
	if n := count(t, s, `SELECT duplicates FROM inbox WHERE message_id = 'evt_js1'`); n != 2 {
		t.Errorf("inbox duplicates = %d, want 2", n)
	}
	if n := count(t, s, `SELECT count(*) FROM processed_messages WHERE message_id = 'evt_js1'`); n != 1 {
		t.Errorf("processed rows = %d, want 1", n)
	}
}

// TestJetStreamTwoProcessesDispatchOnce runs two worker processes (consumer
// and dispatcher each, own pools) on one durable consumer and one database,
// with dispatchers that compete with the consumers' fast path for every
// row. Every message must be started exactly once.
func TestJetStreamTwoProcessesDispatchOnce(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	cfg := j.ConsumerConfig(t, 5*time.Second, 5)
	cfg.FetchBatch = 5
	// MinAge below zero: dispatchers claim rows the moment they commit.
	dcfg := intake.DispatcherConfig{MinAge: -1, Interval: 20 * time.Millisecond, BatchSize: 4}
	p1 := s.StartProcess(t, j, cfg, dcfg)
	p2 := s.StartProcess(t, j, cfg, dcfg)

	const n = 40
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("evt_two_%02d", i)
		raw := order(ids[i], int64(1000+i), "pm_card_visa")
		j.Publish(t, raw, msgID(t, raw))
		if i%10 == 0 { // and a copy the broker cannot drop
			j.Publish(t, raw, "")
		}
	}
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, "every message dispatched", func() bool {
		_, dispatched, err := s.Store.InboxCounts(ctx)
		return err == nil && dispatched == n
	})
	for _, id := range ids {
		if st := waitStarted(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s outcome = %+v", id, st)
		}
	}

	c1, c2 := p1.Consumer.Stats(), p2.Consumer.Stats()
	d1, d2 := p1.Dispatcher.Stats(), p2.Dispatcher.Stats()
	t.Logf("process 1: consumer %+v dispatcher %+v", c1, d1)
	t.Logf("process 2: consumer %+v dispatcher %+v", c2, d2)
	if got := c1.Started + c2.Started + d1.Started + d2.Started; got != n {
		t.Errorf("workflows started = %d, want %d", got, n)
	}
	// The fast path takes no row lock, and these dispatchers take rows the
	// moment they commit, so a dispatcher may try a start the fast path just
	// made: Temporal refuses it, and it is counted as a duplicate, never as
	// a start. The counts above and below prove one workflow per message.
	t.Logf("starts refused as already started: %d", d1.Duplicates+d2.Duplicates)
	if got := c1.Recorded + c2.Recorded; got != n {
		t.Errorf("recorded = %d, want %d", got, n)
	}
	if got := c1.Duplicates + c2.Duplicates; got != n/10 {
		t.Errorf("duplicates = %d, want %d", got, n/10)
	}
	resp, err := s.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowType = %q", workflows.OrderPlacedName)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCount() != n {
		t.Errorf("temporal has %d OrderPlaced workflows, want %d", resp.GetCount(), n)
	}
	stats := s.Sims.Stripe.Stats()
	if stats.Charges != n {
		t.Errorf("charges = %d, want %d", stats.Charges, n)
	}
	for _, id := range ids {
		if stats.ChargesByMessage[id] != 1 {
			t.Errorf("%s charged %d times", id, stats.ChargesByMessage[id])
		}
	}
}

// TestJetStreamPayloadMismatchQuarantined publishes a second, different
// message under a seen ID. Its Nats-Msg-Id differs (it carries a hash of the
// content), so the broker stores it, and the inbox quarantines it: no
// effect, never dropped, re-drivable with the same verdict.
func TestJetStreamPayloadMismatchQuarantined(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	p := s.StartProcess(t, j, j.ConsumerConfig(t, 5*time.Second, 5), intake.DispatcherConfig{})

	first := order("evt_mm", 201, "pm_card_visa")
	second := bytes.Replace(order("evt_mm", 201, "pm_card_visa"), []byte(`"amount": 1999`), []byte(`"amount": 5000`), 1)
	j.Publish(t, first, msgID(t, first))
	if st := waitStarted(t, s, "evt_mm"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	if ack := j.Publish(t, second, msgID(t, second)); ack.Duplicate {
		t.Fatal("the broker dropped a different payload under a seen ID")
	}
	testenv.Eventually(t, 10*time.Second, "the mismatch to be quarantined", func() bool {
		return p.Consumer.Stats().PayloadMismatches == 1
	})

	ctx := context.Background()
	entries, err := s.Store.QuarantineList(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Reason != store.ReasonPayloadMismatch || entries[0].Source != jetstream.DefaultName ||
		entries[0].MessageID != "evt_mm" || !bytes.Equal(entries[0].Raw, second) {
		t.Fatalf("quarantine = %+v", entries)
	}
	// `starter quarantine retry` re-drives it through Accept: same verdict.
	res, err := s.Intake.Accept(ctx, entries[0].Raw, "quarantine-retry")
	if err != nil || res.Status != intake.StatusInvalid || res.Reason != store.ReasonPayloadMismatch {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_mm"]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if n := count(t, s, `SELECT amount FROM orders WHERE id = 201`); n != 1999 {
		t.Errorf("order amount = %d, want the first payload's 1999", n)
	}
	if n := workflowsFor(t, s.Client, "evt_mm"); n != 1 {
		t.Errorf("workflows = %d, want 1", n)
	}
}

// TestJetStreamPoisonMessageQuarantinedAfterMaxDeliver makes Postgres refuse
// one message's inbox row (a trigger): every delivery of it fails. After
// MaxDeliver deliveries it is quarantined with its raw bytes, while the
// messages behind it flow; once the cause is gone, a retry processes it.
func TestJetStreamPoisonMessageQuarantinedAfterMaxDeliver(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	ctx := context.Background()
	lift := s.RefuseInbox(t, "evt_poison")
	const maxDeliver = 3
	p := s.StartProcess(t, j, j.ConsumerConfig(t, 500*time.Millisecond, maxDeliver), intake.DispatcherConfig{})

	poison := order("evt_poison", 301, "pm_card_visa")
	j.Publish(t, poison, msgID(t, poison))
	good := []string{"evt_after_1", "evt_after_2", "evt_after_3"}
	for i, id := range good {
		raw := order(id, int64(302+i), "pm_card_visa")
		j.Publish(t, raw, msgID(t, raw))
	}
	for _, id := range good {
		if st := waitStarted(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s outcome = %+v", id, st)
		}
	}
	testenv.Eventually(t, 20*time.Second, "the poison message to be quarantined", func() bool {
		return p.Consumer.Stats().MaxDelivered == 1
	})
	stats := p.Consumer.Stats()
	if stats.Retries != maxDeliver-1 || stats.Recorded != int64(len(good)) {
		t.Errorf("consumer stats = %+v; want %d naks, %d recorded", stats, maxDeliver-1, len(good))
	}
	entries, err := s.Store.QuarantineList(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Reason != store.ReasonMaxDeliver || entries[0].MessageID != "evt_poison" ||
		!bytes.Equal(entries[0].Raw, poison) {
		t.Fatalf("quarantine = %+v", entries)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_poison"]; n != 0 {
		t.Errorf("poison message charged %d times", n)
	}

	// The cause is fixed; `starter quarantine retry` re-drives it.
	lift()
	if res, err := s.Intake.Accept(ctx, entries[0].Raw, "quarantine-retry"); err != nil || res.Status != intake.StatusStarted {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	if st := waitStarted(t, s, "evt_poison"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome after retry = %+v", st)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_poison"]; n != 1 {
		t.Errorf("charges after retry = %d, want 1", n)
	}
}

// TestGracefulShutdownSettlesFetchedMessages stops a process while it is
// consuming: every message it fetched is either recorded and acked or left
// to the broker, so a second process completes the rest and every message
// runs once.
func TestGracefulShutdownSettlesFetchedMessages(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	cfg := j.ConsumerConfig(t, 2*time.Second, 5)
	cfg.FetchBatch = 3
	p1 := s.StartProcess(t, j, cfg, intake.DispatcherConfig{})
	const n = 20
	var once sync.Once
	for i := range n {
		raw := order(fmt.Sprintf("evt_stop_%02d", i), int64(400+i), "pm_card_visa")
		j.Publish(t, raw, msgID(t, raw))
		if i == n/2 {
			once.Do(p1.Stop)
		}
	}
	s.StartProcess(t, j, cfg, intake.DispatcherConfig{MinAge: 500 * time.Millisecond})
	for i := range n {
		id := fmt.Sprintf("evt_stop_%02d", i)
		if st := waitStarted(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s outcome = %+v", id, st)
		}
	}
	if got := s.Sims.Stripe.Stats().Charges; got != n {
		t.Errorf("charges = %d, want %d", got, n)
	}
}
