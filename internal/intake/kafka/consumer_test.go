package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/kafka"
	"github.com/effectively/effectively/tools/kafkatest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// fakeTemporal stands in for the Temporal client: these tests are about
// the inbox and the broker. Like the server, it starts a workflow ID once.
type fakeTemporal struct {
	client.Client
	mu      sync.Mutex
	started map[string]int
	tries   map[string]int
}

func newFakeTemporal() *fakeTemporal {
	return &fakeTemporal{started: map[string]int{}, tries: map[string]int{}}
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries[opts.ID]++
	if f.started[opts.ID] > 0 {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("workflow execution already started", "", "")
	}
	f.started[opts.ID]++
	return nil, nil
}

func (f *fakeTemporal) starts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.started))
	for k, v := range f.started {
		out[k] = v
	}
	return out
}

func orderMsg(id string, orderID int) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`, id, orderID)
}

// env is a database, an intake on it and a Kafka broker with a topic.
type env struct {
	st    *store.Store
	in    *intake.Intake
	tc    *fakeTemporal
	addr  string
	topic string
}

func newEnv(t *testing.T, addr string, partitions int32) *env {
	t.Helper()
	pool := storetest.NewPool(t)
	st := store.New(pool)
	tc := newFakeTemporal()
	in, err := intake.New(st, tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, in: in, tc: tc, addr: addr, topic: "orders"}
	if partitions > 0 {
		kafkatest.CreateTopic(t, addr, e.topic, partitions, nil)
	}
	return e
}

func (e *env) config(t *testing.T) kafka.Config {
	return kafka.Config{
		Brokers: []string{e.addr}, Topic: e.topic, Group: "g-" + strings.ToLower(t.Name()),
		StallFirst: 50 * time.Millisecond, StallLongest: 200 * time.Millisecond, Logger: testenv.Logger(t),
	}
}

// running is a consumer's Run in the background.
type running struct {
	c    *kafka.Consumer
	stop func()
}

func (e *env) run(t *testing.T, cfg kafka.Config) *running {
	t.Helper()
	c, err := kafka.NewConsumer(e.in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	r := &running{c: c, stop: func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return 30s after its context ended")
			}
		})
	}}
	t.Cleanup(r.stop)
	return r
}

func (e *env) produce(t *testing.T, records ...*kgo.Record) {
	t.Helper()
	e.produceWith(t, nil, records...)
}

// produceWith produces with a client of opts (a manual partitioner, say).
func (e *env) produceWith(t *testing.T, opts []kgo.Opt, records ...*kgo.Record) {
	t.Helper()
	for _, r := range records {
		if r.Topic == "" {
			r.Topic = e.topic
		}
	}
	kafkatest.Produce(t, kafkatest.Producer(t, e.addr, opts...), records...)
}

func (e *env) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.st.Pool().QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) inboxRows(t *testing.T) int { return e.count(t, `SELECT count(*) FROM inbox`) }

// committed returns the group's committed offset and the end offset of
// each partition.
func (e *env) committed(t *testing.T, group string) (committed, end map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kafkatest.Admin(t, e.addr)
	offs, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		offs, err = nil, nil // nothing committed yet
	}
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, end = map[int32]int64{}, map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) { committed[o.Partition] = o.At })
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return committed, end
}

func (e *env) waitCommittedToEnd(t *testing.T, group string) {
	t.Helper()
	var c, end map[int32]int64
	ok := waitFor(20*time.Second, func() bool {
		c, end = e.committed(t, group)
		for p, o := range end {
			if c[p] != o {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("group %s committed %v, want the end offsets %v", group, c, end)
	}
}

// waitMembers waits until group is stable with n members.
func (e *env) waitMembers(t *testing.T, group string, n int) {
	t.Helper()
	adm := kafkatest.Admin(t, e.addr)
	var state string
	ok := waitFor(30*time.Second, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		if err != nil {
			return false
		}
		g := gs[group]
		state = fmt.Sprintf("%s with %d members", g.State, len(g.Members))
		return g.State == "Stable" && len(g.Members) == n
	})
	if !ok {
		t.Fatalf("group %s: %s, want Stable with %d", group, state, n)
	}
}

func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func records(prefix string, n int) ([]*kgo.Record, []string) {
	rs := make([]*kgo.Record, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s_%03d", prefix, i)
		rs[i] = &kgo.Record{Key: []byte(ids[i]), Value: orderMsg(ids[i], 1000+i)}
	}
	return rs, ids
}

func TestConsumerRecordsStartsAndCommits(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 3)
	rs, ids := records("evt_k", 120)
	e.produce(t, rs...)
	cfg := e.config(t)
	r := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return len(e.tc.starts()) == len(ids) }) {
		t.Fatalf("%d workflows started, want %d; stats %+v", len(e.tc.starts()), len(ids), r.c.Stats())
	}
	r.stop()
	e.waitCommittedToEnd(t, cfg.Group)
	if n := e.inboxRows(t); n != len(ids) {
		t.Fatalf("%d inbox rows, want %d", n, len(ids))
	}
	for id, n := range e.tc.starts() {
		if n != 1 {
			t.Fatalf("%s started %d times", id, n)
		}
	}
	if s := r.c.Stats(); s.Recorded != int64(len(ids)) || s.Retries != 0 {
		t.Fatalf("stats %+v, want %d recorded, 0 retries", s, len(ids))
	}
}

// Commits lost (the group's offsets set back to the start, as after a crash
// between the inbox commit and the offset commit): every record is read
// again, and the inbox recognises each as a copy; nothing starts twice.
func TestConsumerRereadIsRecognised(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 2)
	rs, ids := records("evt_re", 40)
	e.produce(t, rs...)
	cfg := e.config(t)
	r := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return len(e.tc.starts()) == len(ids) }) {
		t.Fatalf("%d started, want %d", len(e.tc.starts()), len(ids))
	}
	r.stop()
	e.waitCommittedToEnd(t, cfg.Group)

	ctx := context.Background()
	adm := kafkatest.Admin(t, addr)
	back := kadm.Offsets{}
	for p := range int32(2) {
		back.Add(kadm.Offset{Topic: e.topic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(ctx, cfg.Group, back); err != nil {
		t.Fatal(err)
	}
	r2 := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return r2.c.Stats().Duplicates == int64(len(ids)) }) {
		t.Fatalf("second consumer stats %+v, want %d duplicates", r2.c.Stats(), len(ids))
	}
	r2.stop()
	e.waitCommittedToEnd(t, cfg.Group)
	if n := e.inboxRows(t); n != len(ids) {
		t.Fatalf("%d inbox rows, want %d", n, len(ids))
	}
	for id, n := range e.tc.starts() {
		if n != 1 {
			t.Fatalf("%s started %d times", id, n)
		}
	}
}

// refuseInbox makes every inbox insert fail (Postgres cannot record
// anything) until lift is called.
func (e *env) refuseInbox(t *testing.T, only string) (lift func()) {
	t.Helper()
	ctx := context.Background()
	cond := "true"
	if only != "" {
		cond = "NEW.message_id = '" + only + "'"
	}
	if _, err := e.st.Pool().Exec(ctx, `
		CREATE FUNCTION refuse_all() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF `+cond+` THEN RAISE EXCEPTION 'simulated outage recording %', NEW.message_id; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_all BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_all();`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := e.st.Pool().Exec(ctx, `DROP TRIGGER refuse_all ON inbox`); err != nil {
			t.Fatal(err)
		}
	}
}

// A record the inbox cannot take stalls its partition: the commit never
// passes it, however long it lasts and whatever comes after it, and once
// the inbox takes it again it is recorded — never skipped, never
// quarantined. The other partition goes on.
func TestPostgresDownStallsThePartition(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 2)
	cfg := e.config(t)
	// Partition 0: three records, the second one refused; partition 1: two.
	e.produceWith(t, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())},
		&kgo.Record{Partition: 0, Value: orderMsg("evt_p0_a", 1)},
		&kgo.Record{Partition: 0, Value: orderMsg("evt_poison", 2)},
		&kgo.Record{Partition: 0, Value: orderMsg("evt_p0_c", 3)},
		&kgo.Record{Partition: 1, Value: orderMsg("evt_p1_a", 4)},
		&kgo.Record{Partition: 1, Value: orderMsg("evt_p1_b", 5)},
	)
	lift := e.refuseInbox(t, "evt_poison")
	r := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return r.c.Stalls() >= 3 }) {
		t.Fatalf("stats %+v: want the partition stalled and retried at least 3 times", r.c.Stats())
	}
	c, _ := e.committed(t, cfg.Group)
	if c[0] > 1 {
		t.Fatalf("partition 0 committed at %d past the unrecorded record at offset 1", c[0])
	}
	if !waitFor(15*time.Second, func() bool { c, _ = e.committed(t, cfg.Group); return c[1] == 2 }) {
		t.Fatalf("partition 1 not committed to its end while partition 0 stalls: %v", c)
	}
	if n := e.count(t, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Fatalf("%d quarantined: a record Postgres could not take is retried, not quarantined", n)
	}
	lift()
	e.waitCommittedToEnd(t, cfg.Group)
	if n := e.count(t, `SELECT count(*) FROM inbox WHERE message_id = 'evt_poison'`); n != 1 {
		t.Fatalf("evt_poison has %d inbox rows after the outage, want 1", n)
	}
	if n := e.inboxRows(t); n != 5 {
		t.Fatalf("%d inbox rows, want 5", n)
	}
	for id, n := range e.tc.starts() {
		if n != 1 {
			t.Fatalf("%s started %d times", id, n)
		}
	}
}

// A record that can never be recorded is quarantined with its reason, and
// only then is the commit moved past it. One of a type this worker does not
// know stalls its partition a few times first (a worker that knows it may
// be on its way).
func TestNeverRecordableIsQuarantinedThenCommitted(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 1)
	cfg := e.config(t)
	big := bytes.Repeat([]byte("x"), 100<<10) // over message.MaxSize (64 KiB), under the broker's 1 MiB
	e.produce(t,
		&kgo.Record{Value: []byte("not json")},
		&kgo.Record{Value: big},
		&kgo.Record{Value: []byte(`{"id": "evt_unknown_type", "type": "order.teleported", "data": {}}`)},
		&kgo.Record{Value: orderMsg("evt_after", 9)},
	)
	r := e.run(t, cfg)
	e.waitCommittedToEnd(t, cfg.Group)
	r.stop()
	got := map[string]int{}
	rows, err := e.st.Pool().Query(context.Background(), `SELECT reason, source FROM quarantine`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var reason, source string
		if err := rows.Scan(&reason, &source); err != nil {
			t.Fatal(err)
		}
		if source != kafka.DefaultName {
			t.Fatalf("quarantine source %q, want %q", source, kafka.DefaultName)
		}
		got[reason]++
	}
	if got[store.ReasonInvalid] != 2 || got[store.ReasonTooLarge] != 1 {
		t.Fatalf("quarantined %v, want 2 invalid (bad JSON, unknown type) and 1 too_large", got)
	}
	if r.c.Stalls() < kafka.DefaultUnknownTypeStalls {
		t.Fatalf("%d stalls: the unknown type is handed back %d times (a rolling deploy) before its quarantine", r.c.Stalls(), kafka.DefaultUnknownTypeStalls)
	}
	if e.inboxRows(t) != 1 || e.tc.starts()["order-placed/evt_after"] != 1 {
		t.Fatalf("the valid record after them: %d inbox rows, starts %v", e.inboxRows(t), e.tc.starts())
	}
}

// A quarantine that Postgres cannot write either stalls the partition: a
// never-recordable record is committed past only once it is kept.
func TestQuarantineFailureStalls(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 1)
	cfg := e.config(t)
	ctx := context.Background()
	if _, err := e.st.Pool().Exec(ctx, `
		CREATE FUNCTION refuse_q() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage'; END $$;
		CREATE TRIGGER refuse_q BEFORE INSERT ON quarantine FOR EACH ROW EXECUTE FUNCTION refuse_q();`); err != nil {
		t.Fatal(err)
	}
	e.produce(t, &kgo.Record{Value: []byte("not json")}, &kgo.Record{Value: orderMsg("evt_q_after", 1)})
	r := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return r.c.Stalls() >= 2 }) {
		t.Fatalf("stats %+v, want stalls", r.c.Stats())
	}
	if c, _ := e.committed(t, cfg.Group); c[0] > 0 {
		t.Fatalf("committed %d past a record not yet quarantined", c[0])
	}
	if _, err := e.st.Pool().Exec(ctx, `DROP TRIGGER refuse_q ON quarantine`); err != nil {
		t.Fatal(err)
	}
	e.waitCommittedToEnd(t, cfg.Group)
	if n := e.count(t, `SELECT count(*) FROM quarantine`); n != 1 {
		t.Fatalf("%d quarantine rows, want 1", n)
	}
}

// Two members of one group, the second joining mid-stream (a rebalance):
// every message is recorded once and started once, and the group commits
// to the end.
func TestRebalanceMidStream(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 4)
	cfg := e.config(t)
	cfg.MaxPollRecords = 10
	first, ids1 := records("evt_rb1", 200)
	e.produce(t, first...)
	r1 := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return r1.c.Stats().Delivered > 20 }) {
		t.Fatalf("first member polled nothing: %+v", r1.c.Stats())
	}
	r2 := e.run(t, cfg)
	e.waitMembers(t, cfg.Group, 2)
	second, ids2 := records("evt_rb2", 200)
	e.produce(t, second...)
	want := len(ids1) + len(ids2)
	if !waitFor(30*time.Second, func() bool { return len(e.tc.starts()) == want }) {
		t.Fatalf("%d started, want %d; stats %+v %+v", len(e.tc.starts()), want, r1.c.Stats(), r2.c.Stats())
	}
	if r2.c.Stats().Delivered == 0 {
		t.Fatalf("the second member got no partition: %+v", r2.c.Stats())
	}
	r1.stop() // a second rebalance: its partitions move to r2
	r2.stop()
	e.waitCommittedToEnd(t, cfg.Group)
	if n := e.inboxRows(t); n != want {
		t.Fatalf("%d inbox rows, want %d", n, want)
	}
	for id, n := range e.tc.starts() {
		if n != 1 {
			t.Fatalf("%s started %d times", id, n)
		}
	}
}

// The broker is SIGKILLed and restarted on the same port and data while
// the consumer runs: what was produced before and after is recorded once
// each, and the group commits to the end.
func TestBrokerRestart(t *testing.T) {
	p := kafkatest.StartProcess(t, 2, "orders")
	e := newEnv(t, p.Addr(), 0)
	cfg := e.config(t)
	before, ids1 := records("evt_br1", 50)
	e.produce(t, before...)
	r := e.run(t, cfg)
	if !waitFor(20*time.Second, func() bool { return len(e.tc.starts()) == len(ids1) }) {
		t.Fatalf("%d started before the restart, want %d", len(e.tc.starts()), len(ids1))
	}
	p.Restart(t)
	after, ids2 := records("evt_br2", 50)
	e.produce(t, after...)
	want := len(ids1) + len(ids2)
	if !waitFor(60*time.Second, func() bool { return len(e.tc.starts()) == want }) {
		t.Fatalf("%d started after the restart, want %d; stats %+v", len(e.tc.starts()), want, r.c.Stats())
	}
	e.waitCommittedToEnd(t, cfg.Group)
	r.stop()
	if n := e.inboxRows(t); n != want {
		t.Fatalf("%d inbox rows, want %d", n, want)
	}
}

// TestBatchBoundWhenPostgresHangs: every inbox insert hangs (8 s, past the
// batch's bound of 3 s here). The batch (70
// records on each of 3 partitions) still ends within its bound, every
// partition stalled, so the rebalances it holds back wait no longer than
// that (without it, each partition cost a handling timeout of 30 s, one
// after the other: 2 minutes, past the group's 60 s rebalance timeout).
func TestBatchBoundWhenPostgresHangs(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	e := newEnv(t, addr, 3)
	cfg := e.config(t)
	cfg.BatchBound = 3 * time.Second
	var rs []*kgo.Record
	for p := range int32(3) {
		for i := range 70 {
			rs = append(rs, &kgo.Record{Partition: p, Value: orderMsg(fmt.Sprintf("evt_hang_%d_%03d", p, i), int(p)*1000+i+1)})
		}
	}
	e.produceWith(t, []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, rs...)
	if _, err := e.st.Pool().Exec(context.Background(), `
		CREATE FUNCTION hang() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(8); RETURN NEW; END $$;
		CREATE TRIGGER hang BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION hang();`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := e.run(t, cfg)
	if !waitFor(25*time.Second, func() bool { return r.c.Stalls() >= 3 }) {
		t.Fatalf("after %s: %d partitions stalled, want 3 within the batch's bound (3 s) and a handling timeout at most", time.Since(start).Round(time.Second), r.c.Stalls())
	}
	t.Logf("the batch ended, 3 partitions stalled, after %s", time.Since(start).Round(100*time.Millisecond))
}
