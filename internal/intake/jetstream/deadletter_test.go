package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/testenv"
)

// killedHolding plays a worker that took every delivery of the durable's
// one message, up to its last, on a connection of its own and died
// holding each: no ack, no nak, no term, then the connection gone. The
// broker counts the deliveries and, past the last, delivers the message no
// more.
func killedHolding(t *testing.T, url, stream, durable string, deliveries int, ackWait time.Duration) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= deliveries; n++ {
		batch, err := cons.Fetch(1, natsjs.FetchMaxWait(ackWait+5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			if md.NumDelivered != uint64(n) {
				t.Fatalf("delivery %d of the message, want %d", md.NumDelivered, n)
			}
			got++
		}
		if got != 1 {
			t.Fatalf("fetch %d brought %d messages (%v), want the one", n, got, batch.Error())
		}
	}
}

// deadLetter makes a consumer of a fresh stream (ack wait 1 s, 2
// deliveries) and one message id whose deliveries a killed worker held
// (killedHolding), and returns them before the consumer runs.
func deadLetter(t *testing.T, id string, orderID int, reg *prometheus.Registry) (*harness, jetstream.Config, *jetstream.Consumer) {
	t.Helper()
	return deadLetterAt(t, testenv.NATSURL(), testenv.JetStreamOptions{}, id, orderID, reg)
}

// deadLetterAt is deadLetter on the NATS server at natsURL.
func deadLetterAt(t *testing.T, natsURL string, o testenv.JetStreamOptions, id string, orderID int, reg *prometheus.Registry) (*harness, jetstream.Config, *jetstream.Consumer) {
	t.Helper()
	h := newHarnessAt(t, nil, natsURL, o)
	cfg := h.j.ConsumerConfig(t, time.Second, 2)
	cfg.Metrics = metrics.New(reg)
	cons, err := jetstream.NewConsumer(context.Background(), h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.j.Publish(t, orderMsg(id, orderID), id)
	killedHolding(t, h.j.Conn.ConnectedUrl(), h.j.Stream, cfg.Durable, 2, time.Second)
	return h, cfg, cons
}

// TestDeadLetterRecordsALastDeliveryNoWorkerSettled kills the worker that
// held a message's last delivery: JetStream then never delivers it again,
// and before the dead letters it stayed in the stream neither recorded nor
// quarantined, with nothing logged. The next worker must read the broker's
// max-delivery advisory and record the message (Postgres answers), start
// its workflow once, and ack the advisory.
func TestDeadLetterRecordsALastDeliveryNoWorkerSettled(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, cfg, cons := deadLetter(t, "evt_dead_001", 4001, reg)
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "the dead letter recorded", func() bool {
		return h.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_dead_001'`) == 1
	})
	testenv.Eventually(t, 30*time.Second, "its advisory acked", func() bool {
		return deadLettersLeft(t, h, cfg.Durable) == 0
	})
	stop()
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows, want none: the message was recorded", n)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 1 {
		t.Errorf("%s = %v, want 1", metrics.NameDeadLetters, n)
	}
	if s := cons.Stats(); s.Recorded != 1 || s.MaxDelivered != 0 {
		t.Errorf("stats %+v: want it recorded once, not quarantined", s)
	}
	if starts := h.tc.Starts(); len(starts) != 1 {
		t.Errorf("workflow starts %v, want the message's one", starts)
	} else {
		for id, n := range starts {
			if n != 1 {
				t.Errorf("workflow %s started %d times, want once", id, n)
			}
		}
	}
}

// TestDeadLetterPastTheRecordAgeIsQuarantined: an advisory older than the
// age a record stays safe at (its message's record may have been pruned)
// quarantines the message as max_deliver instead, its raw bytes kept.
func TestDeadLetterPastTheRecordAgeIsQuarantined(t *testing.T) {
	defer jetstream.SetDeadLetterRecordAge(time.Nanosecond)()
	h, cfg, cons := deadLetter(t, "evt_dead_002", 4002, prometheus.NewRegistry())
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "the dead letter quarantined", func() bool {
		return h.count(t, `SELECT count(*) FROM quarantine WHERE message_id = 'evt_dead_002' AND reason = $1`, store.ReasonMaxDeliver) == 1
	})
	testenv.Eventually(t, 30*time.Second, "its advisory acked", func() bool {
		return deadLettersLeft(t, h, cfg.Durable) == 0
	})
	stop()
	if n := h.count(t, `SELECT count(*) FROM inbox`); n != 0 {
		t.Errorf("%d inbox rows, want none", n)
	}
	if n := h.count(t, `SELECT count(*) FROM quarantine WHERE raw = convert_to($1, 'UTF8')`, string(orderMsg("evt_dead_002", 4002))); n != 1 {
		t.Errorf("the quarantine row does not hold the message as published")
	}
}

// TestOldDeadLetterOfARecordedMessageIsNotQuarantined: the message was
// recorded, only its acks were lost (or the dead-letter consumer was made
// again and reads old advisories): an old dead letter finds its inbox row
// and is acked, with no quarantine row for a message that was processed.
func TestOldDeadLetterOfARecordedMessageIsNotQuarantined(t *testing.T) {
	defer jetstream.SetDeadLetterRecordAge(time.Nanosecond)()
	h, cfg, cons := deadLetter(t, "evt_dead_003", 4003, prometheus.NewRegistry())
	if _, err := h.in.Record(context.Background(), orderMsg("evt_dead_003", 4003), "jetstream"); err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "its advisory acked", func() bool {
		return deadLettersLeft(t, h, cfg.Durable) == 0
	})
	stop()
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows for a message the inbox holds, want none", n)
	}
	if n := h.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_dead_003'`); n != 1 {
		t.Errorf("%d inbox rows, want the one", n)
	}
}

// TestDeadLetterOfADeletedStreamIsDropped: an advisory outlives its
// stream when the stream is deleted and made again, and its sequence then
// holds another, newer message. That message is not the dead letter's: it
// must be recorded once by the consumer, not taken up as a dead letter.
func TestDeadLetterOfADeletedStreamIsDropped(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, cfg, _ := deadLetter(t, "evt_dead_004", 4004, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	giveUp(ctx, t, h.j.JS, h.j.Stream, cfg.Durable)
	if err := h.j.JS.DeleteStream(ctx, h.j.Stream); err != nil {
		t.Fatal(err)
	}
	if _, _, err := jetstream.EnsureStream(ctx, h.j.JS, jetstream.StreamSpec{Name: h.j.Stream, Subjects: []string{h.j.Subject}}); err != nil {
		t.Fatal(err)
	}
	h.j.Publish(t, orderMsg("evt_dead_005", 4005), "evt_dead_005") // sequence 1 again
	cons, err := jetstream.NewConsumer(ctx, h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "the new message recorded and the advisory acked", func() bool {
		return h.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_dead_005'`) == 1 && deadLettersLeft(t, h, cfg.Durable) == 0
	})
	stop()
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 0 {
		t.Errorf("%s = %v: the new message was taken up as the old one's dead letter", metrics.NameDeadLetters, n)
	}
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows, want none", n)
	}
}

// TestDeadLetterOutlivesABrokerCrash: the broker gave up on a message (its
// last delivery held by a killed worker) and captured the advisory, and then
// the broker itself was killed (SIGKILL) and started again before any
// worker read the advisory. The advisory, its durable consumer and the
// message must all survive the crash, and the next worker record the message
// once and ack the advisory.
func TestDeadLetterOutlivesABrokerCrash(t *testing.T) {
	srv := natstest.Start(t, "")
	reg := prometheus.NewRegistry()
	h, cfg, cons := deadLetterAt(t, srv.URL("nats", "127.0.0.1"), testenv.JetStreamOptions{}, "evt_dead_006", 4006, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	giveUp(ctx, t, h.j.JS, h.j.Stream, cfg.Durable)
	srv.Crash(t)
	testenv.Eventually(t, 15*time.Second, "the worker's connection back", h.j.Conn.IsConnected)
	if st, err := h.j.JS.Stream(ctx, jetstream.DeadLetterStream(h.j.Stream)); err != nil || st.CachedInfo().State.Msgs != 1 {
		t.Fatalf("after the crash the dead-letter stream holds %v (%v), want the advisory", st, err)
	}
	recordsTheDeadLetter(t, h, cfg, cons, reg, "evt_dead_006")
}

// recordsTheDeadLetter runs cons until message id is recorded from its
// dead letter and the advisory acked, then checks that nothing was
// quarantined, the dead letter counted once and every workflow started once.
func recordsTheDeadLetter(t *testing.T, h *harness, cfg jetstream.Config, cons *jetstream.Consumer, reg *prometheus.Registry, id string) {
	t.Helper()
	stop := run(t, cons)
	testenv.Eventually(t, 60*time.Second, "the dead letter recorded and its advisory acked", func() bool {
		return h.count(t, `SELECT count(*) FROM inbox WHERE message_id = $1`, id) == 1 && deadLettersLeft(t, h, cfg.Durable) == 0
	})
	stop()
	if n := h.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows, want none: the message was recorded", n)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 1 {
		t.Errorf("%s = %v, want 1", metrics.NameDeadLetters, n)
	}
	for wf, n := range h.tc.Starts() {
		if n != 1 {
			t.Errorf("workflow %s started %d times, want once", wf, n)
		}
	}
}

// giveUp pulls from the durable past its last delivery's ack wait, so that
// the broker gives up on the held message and captures the advisory.
func giveUp(ctx context.Context, t *testing.T, js natsjs.JetStream, stream, durable string) {
	t.Helper()
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := c.Fetch(1, natsjs.FetchMaxWait(time.Second)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the advisory captured", func() bool {
		st, err := js.Stream(ctx, jetstream.DeadLetterStream(stream))
		return err == nil && st.CachedInfo().State.Msgs == 1
	})
}

// deadLettersLeft is how many advisories the durable's dead-letter
// consumer has not yet acked; 1 while its info does not come (on a
// cluster, the consumer may still be electing a leader after one was
// killed). Its callers wait for 0.
func deadLettersLeft(t *testing.T, h *harness, durable string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := h.j.JS.Consumer(ctx, jetstream.DeadLetterStream(h.j.Stream), durable+"-dead-letters")
	if err != nil {
		t.Logf("the dead-letter consumer: %v", err)
		return 1
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Logf("the dead-letter consumer's info: %v", err)
		return 1
	}
	if ci.Delivered.Consumer == 0 {
		return 1 // no advisory yet
	}
	return ci.NumAckPending + int(ci.NumPending) //nolint:gosec // a handful
}

// TestDeadLettersReplicatedLikeTheirStream: on a three-server cluster, the
// dead-letter stream is made with as many replicas as the intake stream it
// serves (a dead letter is the last trace of a message that stream
// delivers no more), and captures the advisory of a message held past its
// last delivery.
func TestDeadLettersReplicatedLikeTheirStream(t *testing.T) {
	_, _, nc := startCluster(t)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, _, err := jetstream.EnsureStream(ctx, js, jetstream.StreamSpec{Name: "REPL", Subjects: []string{"repl.messages.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.Config{Stream: "REPL", Subject: "repl.messages.>", Durable: "worker", AckWait: time.Second, MaxDeliver: 1}
	dead, err := jetstream.EnsureDeadLetters(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, jetstream.DeadLetterStream("REPL"))
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Errorf("the dead-letter stream has %d replicas, want the intake stream's 3", r)
	}
	if _, err := js.Publish(ctx, "repl.messages.order.placed", orderMsg("evt_repl_1", 4101)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "REPL", natsjs.ConsumerConfig{Durable: cfg.Durable, AckPolicy: natsjs.AckExplicitPolicy,
		AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver, DeliverPolicy: natsjs.DeliverAllPolicy}); err != nil {
		t.Fatal(err)
	}
	killedHolding(t, nc.ConnectedUrl(), "REPL", cfg.Durable, cfg.MaxDeliver, cfg.AckWait)
	giveUp(ctx, t, js, "REPL", cfg.Durable)
	adv, err := dead.Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range adv.Messages() {
		got++
		_ = m.Ack()
	}
	if got != 1 {
		t.Errorf("%d advisories captured on the cluster (%v), want the held message's", got, adv.Error())
	}
}

// startCluster starts three nats-servers as one JetStream cluster and
// waits until JetStream answers on it (a meta leader elected). It returns
// the servers, their URLs joined for nats.Connect, and the connection that
// waited (reconnecting for ever, closed when t ends).
func startCluster(t *testing.T) ([]*natstest.Server, string, *nats.Conn) {
	t.Helper()
	servers := natstest.StartCluster(t, 3, "")
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL("nats", "127.0.0.1")
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	testenv.Eventually(t, 60*time.Second, "the cluster's JetStream answering", func() bool {
		// Each try on its own deadline: a request made before the meta
		// leader is elected is never answered.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := nc.RequestWithContext(ctx, "$JS.API.INFO", nil)
		return err == nil
	})
	return servers, strings.Join(urls, ","), nc
}

// TestDeadLetterOutlivesLosingItsLeader: on a three-server cluster, with
// a held message's advisory captured and not yet taken up, the server
// leading the dead-letter stream is killed and stays down. A worker then
// records the message once from its dead letter, through the stream's new
// leader, and acks the advisory.
func TestDeadLetterOutlivesLosingItsLeader(t *testing.T) {
	servers, urls, _ := startCluster(t)
	reg := prometheus.NewRegistry()
	h, cfg, cons := deadLetterAt(t, urls, testenv.JetStreamOptions{Replicas: 3}, "evt_dead_lost", 4301, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	giveUp(ctx, t, h.j.JS, h.j.Stream, cfg.Durable)
	st, err := h.j.JS.Stream(ctx, jetstream.DeadLetterStream(h.j.Stream))
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("dead-letter stream: %d replicas, cluster %+v; want 3 and a leader", info.Config.Replicas, info.Cluster)
	}
	leader := info.Cluster.Leader
	for _, s := range servers {
		if s.Name == leader {
			s.Kill()
		}
	}
	testenv.Eventually(t, 60*time.Second, "another leader for the dead-letter stream", func() bool {
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := h.j.JS.Stream(tctx, jetstream.DeadLetterStream(h.j.Stream))
		return err == nil && st.CachedInfo().Cluster != nil && st.CachedInfo().Cluster.Leader != "" &&
			st.CachedInfo().Cluster.Leader != leader && st.CachedInfo().State.Msgs == 1
	})
	recordsTheDeadLetter(t, h, cfg, cons, reg, "evt_dead_lost")
}
