package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// fakeTemporal starts a workflow ID once and refuses it after that, like
// the server: these tests are about the inbox and the broker.
type fakeTemporal struct {
	client.Client
	mu      sync.Mutex
	started map[string]int
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started[opts.ID] > 0 {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	f.started[opts.ID]++
	return nil, nil
}

func (f *fakeTemporal) starts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, v := range f.started {
		n += v
	}
	return n
}

type fixture struct {
	pool *pgxpool.Pool
	tc   *fakeTemporal
	in   *intake.Intake
	cfg  rabbitmq.Config
	pub  *amqp.Channel
}

func newFixture(t *testing.T, url string, adjust ...func(*rabbitmq.Config)) *fixture {
	t.Helper()
	pool := storetest.NewPool(t)
	tc := &fakeTemporal{started: map[string]int{}}
	in, err := intake.New(store.New(pool), tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rabbittest.Config(t, url)
	cfg.Logger = testenv.Logger(t)
	cfg.RetryDelays = []time.Duration{50 * time.Millisecond}
	for _, a := range adjust {
		a(&cfg)
	}
	f := &fixture{pool: pool, tc: tc, in: in, cfg: cfg}
	f.pub = rabbittest.Channel(t, url)
	if err := rabbitmq.Declare(f.pub, cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

func order(id string, n int) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`, id, n)
}

func (f *fixture) publish(t *testing.T, bodies ...[]byte) {
	t.Helper()
	for _, b := range bodies {
		if err := f.pub.Publish(f.cfg.Exchange, "order.placed", false, false, amqp.Publishing{Body: b, DeliveryMode: amqp.Persistent}); err != nil {
			t.Fatal(err)
		}
	}
}

// run runs a consumer of cfg until the returned stop is called.
func (f *fixture) run(t *testing.T, cfg rabbitmq.Config, setup func(*rabbitmq.Consumer)) (*rabbitmq.Consumer, func()) {
	t.Helper()
	c, err := rabbitmq.NewConsumer(f.in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of its cancel")
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func (f *fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually waits up to 30s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queueDepth is the number of ready messages in q (passive declare).
func queueDepth(t *testing.T, url, q string) int {
	t.Helper()
	ch := rabbittest.Channel(t, url)
	defer ch.Close()
	qi, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Messages
}

// TestCopiesStartOnce: three copies of one message (the broker does no
// publish dedup) and one other: two inbox rows, two starts, four acks.
func TestCopiesStartOnce(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	f.publish(t, order("evt_a", 1), order("evt_a", 1), order("evt_b", 2), order("evt_a", 1))
	c, stop := f.run(t, f.cfg, nil)
	eventually(t, "4 deliveries settled", func() bool { s := c.Stats(); return s.Recorded+s.Duplicates == 4 })
	eventually(t, "2 starts", func() bool { return f.tc.starts() == 2 })
	stop()
	if n := f.count(t, `SELECT count(*) FROM inbox`); n != 2 {
		t.Fatalf("inbox rows = %d, want 2", n)
	}
	if s := c.Stats(); s.Recorded != 2 || s.Duplicates != 2 {
		t.Fatalf("stats %+v: want 2 recorded, 2 duplicates", s)
	}
	if d := queueDepth(t, f.cfg.URL, f.cfg.Queue); d != 0 {
		t.Fatalf("%d messages left in the queue, want 0 (all acked)", d)
	}
}

// refuse makes Postgres refuse inbox rows of id (a trigger) until lifted.
func refuse(t *testing.T, pool *pgxpool.Pool, id string) (lift func()) {
	t.Helper()
	return testenv.RefuseInbox(t, pool, id)
}

// TestNotRecordedIsRejectedThenRecorded: while Postgres refuses the row the
// delivery is rejected with requeue (never acked); once it accepts, the
// redelivery is recorded and started once.
func TestNotRecordedIsRejectedThenRecorded(t *testing.T) {
	f := newFixture(t, rabbittest.URL(), func(c *rabbitmq.Config) { c.MaxDeliver = 50 })
	lift := refuse(t, f.pool, "evt_pg")
	cfg := f.cfg
	f.publish(t, order("evt_pg", 7))
	c, stop := f.run(t, cfg, nil)
	eventually(t, "two rejects", func() bool { return c.Stats().Retries >= 2 })
	if n := f.count(t, `SELECT count(*) FROM inbox`); n != 0 {
		t.Fatalf("inbox rows = %d while Postgres refuses", n)
	}
	lift()
	eventually(t, "recorded", func() bool { return c.Stats().Recorded == 1 })
	eventually(t, "started", func() bool { return f.tc.starts() == 1 })
	stop()
	if n := f.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Fatalf("quarantine rows = %d, want 0", n)
	}
	if d := queueDepth(t, f.cfg.URL, f.cfg.Queue); d != 0 {
		t.Fatalf("%d messages left in the queue", d)
	}
}

// TestMaxDeliverQuarantines: a message that can never be recorded is
// quarantined on delivery MaxDeliver, as x-delivery-count says, then acked:
// kept with its reason, not dead-lettered, not redelivered.
func TestMaxDeliverQuarantines(t *testing.T) {
	f := newFixture(t, rabbittest.URL(), func(c *rabbitmq.Config) { c.MaxDeliver = 3 })
	refuse(t, f.pool, "evt_poison")
	cfg := f.cfg
	f.publish(t, order("evt_poison", 9), order("evt_fine", 10))
	c, stop := f.run(t, cfg, nil)
	eventually(t, "quarantined", func() bool { return c.Stats().MaxDelivered == 1 })
	eventually(t, "the other recorded", func() bool { return c.Stats().Recorded == 1 })
	stop()
	if s := c.BrokerStats(); s.Rejected != 2 {
		t.Fatalf("rejected %d times, want 2 (deliveries 1 and 2; the 3rd quarantines)", s.Rejected)
	}
	var reason, detail, id string
	if err := f.pool.QueryRow(context.Background(), `SELECT reason, detail, message_id FROM quarantine`).Scan(&reason, &detail, &id); err != nil {
		t.Fatal(err)
	}
	if reason != store.ReasonMaxDeliver || id != "evt_poison" || !strings.Contains(detail, "last delivery (3)") {
		t.Fatalf("quarantine row: %s %s %q", reason, id, detail)
	}
	if d := queueDepth(t, f.cfg.URL, f.cfg.Queue) + queueDepth(t, f.cfg.URL, f.cfg.DeadLetterQueue); d != 0 {
		t.Fatalf("%d messages left in the queues", d)
	}
}

// TestLostAckAfterCommit: the connection dies between the inbox commit and
// the ack (the worker crashed there): the broker redelivers, the inbox
// recognises the copy, one row, one start.
func TestLostAckAfterCommit(t *testing.T) {
	node := rabbittest.StartNode(t)
	f := newFixture(t, node.URL)
	f.publish(t, order("evt_lost", 3))
	var once sync.Once
	c, stop := f.run(t, f.cfg, func(c *rabbitmq.Consumer) {
		rabbitmq.SetAfterRecord(c, func(*rabbitmq.Delivery) { once.Do(node.CloseConnections) })
	})
	eventually(t, "the copy recognised", func() bool { return c.Stats().Duplicates >= 1 })
	eventually(t, "started", func() bool { return f.tc.starts() == 1 })
	stop()
	s, b := c.Stats(), c.BrokerStats()
	if s.Recorded != 1 || b.Stale < 1 || b.Connections < 2 {
		t.Fatalf("stats %+v %+v: want 1 recorded, the first ack refused as stale, a reconnect", s, b)
	}
	if n := f.count(t, `SELECT count(*) FROM inbox`); n != 1 {
		t.Fatalf("inbox rows = %d", n)
	}
	f.pub = rabbittest.Channel(t, node.URL)
	if d := queueDepth(t, node.URL, f.cfg.Queue); d != 0 {
		t.Fatalf("%d messages left", d)
	}
}

// TestStaleAckNeverSettlesANewerMessage: delivery tags restart at 1 on each
// channel, so the tag of a delivery from a dead connection names a newer
// message on the next one (the trap of amqp091's Recovery, which reuses the
// *Channel). The consumer refuses the old delivery's settle (ErrStale);
// sending its tag on the new channel would have acked the new message.
func TestStaleAckNeverSettlesANewerMessage(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	f.publish(t, order("evt_one", 1), order("evt_two", 2))
	c, err := rabbitmq.NewConsumer(f.in, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ch *amqp.Channel) amqp.Delivery {
		t.Helper()
		var d amqp.Delivery
		eventually(t, "a message", func() bool {
			var ok bool
			d, ok, err = ch.Get(f.cfg.Queue, false)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		})
		return d
	}
	conn1 := rabbittest.Dial(t, f.cfg.URL)
	ch1, _ := conn1.Channel()
	old := &rabbitmq.Delivery{Delivery: get(ch1), Gen: 1}
	rabbitmq.SetLive(c, 1)
	_ = conn1.Close() // evt_one goes back to the queue
	conn2 := rabbittest.Dial(t, f.cfg.URL)
	ch2, _ := conn2.Channel()
	rabbitmq.SetLive(c, 2)
	newer := get(ch2)
	newer2 := get(ch2)
	if newer.DeliveryTag != old.DeliveryTag {
		t.Fatalf("tags: old %d, newer %d: the trap needs the same tag", old.DeliveryTag, newer.DeliveryTag)
	}
	if err := c.Ack(old); !errors.Is(err, rabbitmq.ErrStale) {
		t.Fatalf("Ack of a delivery from an earlier connection = %v, want ErrStale", err)
	}
	if c.BrokerStats().Stale != 1 {
		t.Fatalf("stale count %d", c.BrokerStats().Stale)
	}
	_ = ch2.Close() // both return: nothing was acked
	ch3, _ := conn2.Channel()
	seen := map[string]bool{}
	for range 2 {
		d := get(ch3)
		seen[string(d.Body[8:15])] = true
		_ = d.Ack(false)
	}
	if len(seen) != 2 || newer2.DeliveryTag == newer.DeliveryTag {
		t.Fatalf("after the refused stale ack both messages must come back: %v", seen)
	}
}

// TestBrokerRestart restarts the test's own node while messages are being
// consumed: every message is recorded once, none is left or lost.
func TestBrokerRestart(t *testing.T) {
	node := rabbittest.StartNode(t)
	f := newFixture(t, node.URL)
	const n = 300
	for i := range n {
		f.publish(t, order(fmt.Sprintf("evt_r%03d", i), 1000+i))
	}
	cfg := f.cfg
	cfg.Prefetch = 20
	c, stop := f.run(t, cfg, func(c *rabbitmq.Consumer) {
		// Slow enough that the restart lands mid-stream.
		rabbitmq.SetAfterRecord(c, func(*rabbitmq.Delivery) { time.Sleep(5 * time.Millisecond) })
	})
	eventually(t, "some recorded", func() bool { return c.Stats().Recorded >= 30 })
	node.Restart()
	eventually(t, "every message recorded", func() bool { return f.count(t, `SELECT count(*) FROM inbox`) == n })
	eventually(t, "queue empty", func() bool { return queueDepth(t, node.URL, cfg.Queue) == 0 })
	stop()
	if s, b := c.Stats(), c.BrokerStats(); b.Connections < 2 || s.Recorded != n {
		t.Fatalf("stats %+v %+v: want a reconnect and %d recorded", s, b, n)
	}
	if got := f.tc.starts(); got != n {
		t.Fatalf("starts = %d, want %d", got, n)
	}
	if q := f.count(t, `SELECT count(*) FROM quarantine`); q != 0 {
		t.Fatalf("quarantined %d", q)
	}
}

// TestShutdownSettlesWhatWasReceived: a cancel mid-stream settles every
// delivery already received (recorded and acked, none left unacked), so
// the next run finds only unreceived messages, first deliveries.
func TestShutdownSettlesWhatWasReceived(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	const n = 200
	for i := range n {
		f.publish(t, order(fmt.Sprintf("evt_s%03d", i), 2000+i))
	}
	cfg := f.cfg
	cfg.Prefetch = 50
	c, stop := f.run(t, cfg, func(c *rabbitmq.Consumer) {
		rabbitmq.SetAfterRecord(c, func(*rabbitmq.Delivery) { time.Sleep(10 * time.Millisecond) })
	})
	eventually(t, "some recorded", func() bool { return c.Stats().Recorded >= 20 })
	stop()
	first := c.Stats()
	if first.Recorded != first.Delivered {
		t.Fatalf("stats %+v: every received delivery must be recorded before Run returns", first)
	}
	c2, stop2 := f.run(t, cfg, nil)
	eventually(t, "the rest", func() bool { return f.count(t, `SELECT count(*) FROM inbox`) == n })
	stop2()
	if s := c2.Stats(); s.Duplicates != 0 || s.Recorded != n-first.Recorded {
		t.Fatalf("second run %+v after the first %+v: want no copies", s, first)
	}
}

// TestExpiredIsQuarantined: a message past the queue's TTL is
// dead-lettered by the broker (at least once) and quarantined with the
// reason, never dropped.
func TestExpiredIsQuarantined(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	cfg := f.cfg
	cfg.MessageTTL = 300 * time.Millisecond
	// Redeclared with the short TTL under new names.
	cfg.Queue += ".ttl"
	cfg.DeadLetterQueue += ".ttl"
	t.Cleanup(func() { rabbittest.Delete(t, cfg.URL, []string{cfg.Queue, cfg.DeadLetterQueue}, nil) })
	if err := rabbitmq.Declare(f.pub, cfg); err != nil {
		t.Fatal(err)
	}
	if err := f.pub.Publish(cfg.Exchange, "order.placed", false, false, amqp.Publishing{Body: order("evt_old", 5)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dead-lettered", func() bool { return queueDepth(t, cfg.URL, cfg.DeadLetterQueue) == 1 })
	c, stop := f.run(t, cfg, nil)
	eventually(t, "quarantined", func() bool { return c.BrokerStats().DeadLetters == 1 })
	stop()
	var detail, id string
	if err := f.pool.QueryRow(context.Background(), `SELECT detail, message_id FROM quarantine`).Scan(&detail, &id); err != nil {
		t.Fatal(err)
	}
	if id != "evt_old" || !strings.Contains(detail, "expired") {
		t.Fatalf("quarantine row %s %q", id, detail)
	}
	if d := queueDepth(t, cfg.URL, cfg.DeadLetterQueue); d != 0 {
		t.Fatalf("dead letters left: %d", d)
	}
}

// TestPastTheDeliveryLimitIsRecorded: a message returned more often than
// the queue's delivery limit (here rejected by a consumer that never
// records it; on 3.x a crashed worker counts the same) is dead-lettered by
// the broker, and then recorded from the dead-letter queue like a last
// delivery, its workflow started, not quarantined.
func TestPastTheDeliveryLimitIsRecorded(t *testing.T) {
	f := newFixture(t, rabbittest.URL())
	f.publish(t, order("evt_limit", 6))
	returnPastTheLimit(t, f)
	f.deadLetterRecorded(t, "evt_limit")
}

// deadLetterRecorded runs a consumer until it takes up the one dead
// letter, and checks that id is recorded once, quarantined not, and no
// dead letter left; it returns the consumer's counters.
func (f *fixture) deadLetterRecorded(t *testing.T, id string) rabbitmq.BrokerStats {
	t.Helper()
	c, stop := f.run(t, f.cfg, nil)
	eventually(t, "taken up from the dead-letter queue", func() bool { return c.BrokerStats().DeadLetters == 1 })
	stop()
	if n := f.count(t, `SELECT count(*) FROM inbox WHERE message_id = $1`, id); n != 1 {
		t.Errorf("%d inbox rows, want the message recorded once", n)
	}
	if n := f.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows, want none (recorded like a last delivery)", n)
	}
	if d := queueDepth(t, f.cfg.URL, f.cfg.DeadLetterQueue); d != 0 {
		t.Errorf("dead letters left: %d", d)
	}
	return c.BrokerStats()
}

// TestDeadLetterReturnedOftenIsRenewed: a dead letter handed back to the
// dead-letter queue again and again (workers stopped or cut off while they
// held it) is published again before its returns reach a delivery limit
// (since 4.0 a quorum queue declared without one has 20, and the
// dead-letter queue has no dead-letter exchange, so the broker would drop
// it): the copy is taken up, recorded once, and nothing is left.
func TestDeadLetterReturnedOftenIsRenewed(t *testing.T) {
	defer rabbitmq.SetDeadLetterRenewAt(3)()
	f := newFixture(t, rabbittest.URL())
	f.publish(t, order("evt_renew", 8))
	returnPastTheLimit(t, f)
	ch := rabbittest.Channel(t, f.cfg.URL)
	for returns := 0; returns < 3; {
		m, ok, err := ch.Get(f.cfg.DeadLetterQueue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := m.Reject(true); err != nil {
			t.Fatal(err)
		}
		returns++
	}
	if s := f.deadLetterRecorded(t, "evt_renew"); s.DeadLettersRenewed != 1 {
		t.Errorf("%d dead letters published again, want the one returned 3 times", s.DeadLettersRenewed)
	}
}

// returnPastTheLimit hands the queue's one message back (reject, requeue)
// until the queue's delivery limit dead-letters it, as workers that died
// holding it would.
func returnPastTheLimit(t *testing.T, f *fixture) {
	t.Helper()
	ch := rabbittest.Channel(t, f.cfg.URL)
	for i := 0; queueDepth(t, f.cfg.URL, f.cfg.DeadLetterQueue) == 0; i++ {
		if i > 50 {
			t.Fatalf("not dead-lettered after %d returns", i)
		}
		m, ok, err := ch.Get(f.cfg.Queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if err := m.Reject(true); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestDeadLetterOutlivesANodeRestart: a message dead-lettered past the
// delivery limit, then the node stopped and started again before any
// worker took the dead letter up. The dead letter is recorded once, and the
// queue is consumed again.
func TestDeadLetterOutlivesANodeRestart(t *testing.T) {
	node, f, c, stop := deadLetterAcross(t, (*rabbittest.Node).Restart)
	f.pub = rabbittest.Channel(t, node.URL)
	f.publish(t, order("evt_after_restart", 8))
	eventually(t, "a message published after the restart recorded", func() bool {
		return f.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_after_restart'`) == 1
	})
	stop()
	if s := c.Stats(); s.Recorded != 2 {
		t.Errorf("stats %+v, want the dead letter and the new message recorded", s)
	}
}

// TestDeadLetterOutlivesANodeCrash: the same with the node killed
// (SIGKILL). The dead letter is recorded once. RabbitMQ 3.10.8 may leave
// the main quorum queue without a leader after the kill ("leader not known"
// in its log) and never answer the worker's basic.consume; the worker must
// then give the call up (SetupTimeout), try again, and still stop when told
// to. Before the bound, Run did not return within 30 s of its cancel.
func TestDeadLetterOutlivesANodeCrash(t *testing.T) {
	_, _, _, stop := deadLetterAcross(t, func(n *rabbittest.Node) { n.Kill(); n.Start() })
	stop()
}

// deadLetterAcross dead-letters one message past the delivery limit on a
// node of the test's own, then restarts the node, runs a consumer and waits
// until the dead letter is recorded, once, with nothing quarantined.
func deadLetterAcross(t *testing.T, restart func(*rabbittest.Node)) (*rabbittest.Node, *fixture, *rabbitmq.Consumer, func()) {
	t.Helper()
	node := rabbittest.StartNode(t)
	f := newFixture(t, node.URL)
	f.publish(t, order("evt_limit_restart", 7))
	returnPastTheLimit(t, f)
	restart(node)
	c, stop := f.run(t, f.cfg, nil)
	eventually(t, "taken up from the dead-letter queue", func() bool { return c.BrokerStats().DeadLetters == 1 })
	eventually(t, "the dead letter recorded", func() bool {
		return f.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_limit_restart'`) == 1
	})
	if n := f.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("%d quarantine rows, want none", n)
	}
	if d := queueDepth(t, node.URL, f.cfg.DeadLetterQueue); d != 0 {
		t.Errorf("dead letters left: %d", d)
	}
	return node, f, c, stop
}
