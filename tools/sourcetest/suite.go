package sourcetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/testenv"
)

// Run runs every case against h, each as a subtest named for it; a case h
// cannot express is skipped with "n/a: " and h's reason.
func Run(t *testing.T, h Harness) {
	cases := map[Case]func(*testing.T, Harness){
		CaseCopies: testCopies, CaseLostAck: testLostAck, CaseCrashAfterCommit: testCrashAfterCommit,
		CaseCrashBeforeCommit: testCrashBeforeCommit, CasePostgresDown: testPostgresDown,
		CaseBrokerRestart: testBrokerRestart, CaseMaxAttempts: testMaxAttempts, CaseOutagePastLimit: testOutagePastLimit,
		CaseDeadLetter: testDeadLetter, CaseOversized: testOversized,
		CaseTwoWorkers: testTwoWorkers, CaseHandover: testHandover, CaseOrdering: testOrdering,
	}
	var na []string
	for _, c := range Cases {
		if reason := h.NA(c); reason != "" {
			na = append(na, fmt.Sprintf("%s (%s)", c, reason))
		}
		t.Run(string(c), func(t *testing.T) {
			if reason := h.NA(c); reason != "" {
				t.Skipf("n/a: %s", reason)
			}
			cases[c](t, h)
		})
	}
	if len(na) > 0 {
		t.Logf("%s: n/a: %s", h.Name(), strings.Join(na, "; "))
	}
}

// defaultSub is a subscription that redelivers quickly and does not give up.
var defaultSub = SubscriptionOptions{MaxAttempts: 50, Redelivery: time.Second}

// testCopies: every message published three times is recorded once, its
// two copies counted, started once, and every copy settled.
func testCopies(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("copy", 20)
	for _, raw := range raws {
		for range 3 {
			e.publish(raw)
		}
	}
	w := e.worker(WorkerOptions{})
	e.run(w)
	e.eventually(60*time.Second, "every message recorded, started and settled", func() bool {
		if !e.settled(ids) {
			return false
		}
		for _, r := range e.inbox() {
			if r.duplicates != 2 {
				return false
			}
		}
		return true
	})
	if st := w.Stats(); st.Recorded != 20 || st.Duplicates != 40 || st.Invalid != 0 {
		t.Errorf("stats %+v; want 20 recorded, 40 duplicates", st)
	}
}

// testLostAck: a worker whose acks never reach the broker records the
// message; the broker delivers it again and another worker recognises the
// copy: one row, one start, nothing left unsettled.
func testLostAck(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("lost", 1)
	a := e.worker(WorkerOptions{LoseSettles: true})
	stopA := e.run(a)
	e.publish(raws[0])
	e.eventually(30*time.Second, "the first delivery recorded", func() bool { return len(e.inbox()) == 1 })
	if e.sub.Unsettled(t) == 0 {
		t.Fatalf("the broker holds nothing unsettled although the worker's ack was lost; %s", e.state())
	}
	stopA()
	b := e.worker(WorkerOptions{})
	e.run(b)
	e.eventually(60*time.Second, "the redelivery recognised and settled", func() bool {
		return e.settled(ids) && e.inbox()[ids[0]].duplicates >= 1
	})
	if st := b.Stats(); st.Duplicates < 1 || st.Recorded != 0 {
		t.Errorf("second worker's stats %+v; want the copy recognised, nothing recorded anew", st)
	}
}

// testCrashAfterCommit: the worker dies after the inbox commit, before its
// settle: the broker delivers the message again, the next worker
// recognises the row (a copy) and, since it is still pending, starts it on
// its fast path.
func testCrashAfterCommit(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("after", 1)
	a := e.worker(WorkerOptions{})
	crashed := make(chan struct{})
	e.hook.set(&e.hook.afterInbox, func() { a.Crash(); close(crashed) })
	e.run(a)
	e.publish(raws[0])
	select {
	case <-crashed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker never committed the inbox row; %s", e.state())
	}
	if n := len(e.tc.Starts()); n != 0 {
		t.Fatalf("the crashed worker started %d workflows after its crash", n)
	}
	b := e.worker(WorkerOptions{})
	e.run(b)
	e.eventually(60*time.Second, "the redelivery recognised, started and settled", func() bool {
		return e.settled(ids) && e.inbox()[ids[0]].duplicates >= 1
	})
	if st := b.Stats(); st.Started != 1 || st.Duplicates < 1 {
		t.Errorf("second worker's stats %+v; want the copy recognised and started on its fast path", st)
	}
}

// testCrashBeforeCommit: the worker dies while its inbox statement runs,
// before the commit: nothing is recorded, and the next worker records the
// redelivery as new and starts it.
func testCrashBeforeCommit(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("before", 1)
	a := e.worker(WorkerOptions{})
	crashed := make(chan struct{})
	e.hook.set(&e.hook.beforeInbox, func() { a.Crash(); close(crashed) })
	e.run(a)
	e.publish(raws[0])
	select {
	case <-crashed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker never reached the inbox; %s", e.state())
	}
	if n := len(e.inbox()); n != 0 {
		t.Fatalf("%d inbox rows committed by a statement whose connection broke", n)
	}
	b := e.worker(WorkerOptions{})
	e.run(b)
	e.eventually(60*time.Second, "the redelivery recorded, started and settled", func() bool { return e.settled(ids) })
	if r := e.inbox()[ids[0]]; r.duplicates != 0 {
		t.Errorf("duplicates %d; want 0: nothing was recorded before the crash", r.duplicates)
	}
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v", q)
	}
}

// testPostgresDown: while Postgres refuses every statement, deliveries are
// handed back, never acked, never quarantined; once it is back every
// message is recorded once.
func testPostgresDown(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("down", 10)
	e.hook.down.Store(true)
	w := e.worker(WorkerOptions{})
	e.run(w)
	for _, raw := range raws {
		e.publish(raw)
	}
	e.eventually(60*time.Second, "deliveries handed back while Postgres is down", func() bool { return w.Stats().Retries >= 3 })
	if u := e.sub.Unsettled(t); u != len(ids) {
		t.Errorf("%d messages unsettled at the broker during the outage, want all %d", u, len(ids))
	}
	e.hook.down.Store(false)
	e.eventually(90*time.Second, "every message recorded, started and settled after the outage", func() bool { return e.settled(ids) })
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v during an outage within the delivery limit", q)
	}
}

// testBrokerRestart: the broker restarts between two halves of the
// messages; the running worker reconnects and records all of them once.
func testBrokerRestart(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("restart", 20)
	w := e.worker(WorkerOptions{})
	e.run(w)
	for _, raw := range raws[:10] {
		e.publish(raw)
	}
	e.eventually(60*time.Second, "the first half recorded", func() bool { return len(e.inbox()) == 10 })
	e.sub.RestartBroker(t)
	for _, raw := range raws[10:] {
		e.publish(raw)
	}
	e.eventually(90*time.Second, "every message recorded, started and settled after the restart", func() bool { return e.settled(ids) })
}

// testMaxAttempts: a message the inbox refuses on every delivery is
// quarantined with its raw bytes on the last one (max_deliver) and
// settled, not left to block the subscription or dropped.
func testMaxAttempts(t *testing.T, h Harness) {
	const attempts = 3
	e := newEnv(t, h, SubscriptionOptions{MaxAttempts: attempts, Redelivery: 300 * time.Millisecond})
	ids, raws := orders("max", 1)
	testenv.RefuseInbox(t, e.db, ids[0])
	w := e.worker(WorkerOptions{})
	e.run(w)
	e.publish(raws[0])
	e.eventually(60*time.Second, "the last delivery quarantined and settled", func() bool {
		return e.quarantine()[store.ReasonMaxDeliver] == 1 && e.sub.Unsettled(t) == 0
	})
	if q := e.quarantineRows(); string(q[0].raw) != string(raws[0]) {
		t.Errorf("quarantine keeps %q, want the message as published", q[0].raw)
	}
	if st := w.Stats(); st.MaxDelivered != 1 || st.Retries != attempts-1 || st.Delivered != attempts {
		t.Errorf("stats %+v; want %d deliveries, %d retries, 1 quarantined", st, attempts, attempts-1)
	}
	if n := len(e.inbox()); n != 0 {
		t.Errorf("%d inbox rows although the inbox refused every statement", n)
	}
}

// testDeadLetter: a worker dies holding each delivery of a message, the last
// one included, before its inbox statement commits, so the broker delivers
// the message no more. The next worker must still record it once, from the
// broker's dead letter (JetStream's max-delivery advisory, RabbitMQ's
// dead-letter queue), start it once and quarantine nothing: a crash is not
// the message's fault.
func testDeadLetter(t *testing.T, h Harness) {
	const attempts = 2
	e := newEnv(t, h, SubscriptionOptions{MaxAttempts: attempts, Redelivery: time.Second})
	ids, raws := orders("dead", 1)
	for n := 1; n <= attempts; n++ {
		w := e.worker(WorkerOptions{})
		crashed := make(chan struct{})
		e.hook.set(&e.hook.beforeInbox, func() { w.Crash(); close(crashed) })
		e.run(w)
		if n == 1 {
			e.publish(raws[0])
		}
		select {
		case <-crashed:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d never reached the inbox; %s", n, e.state())
		}
	}
	if n := len(e.inbox()); n != 0 {
		t.Fatalf("%d inbox rows committed by statements whose connections broke", n)
	}
	c := e.worker(WorkerOptions{})
	e.run(c)
	e.eventually(60*time.Second, "the dead letter recorded, started and settled", func() bool { return e.settled(ids) })
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v: the deliveries were lost to crashes, not refused", q)
	}
	if st := c.Stats(); st.Recorded != 1 || st.MaxDelivered != 0 {
		t.Errorf("last worker's stats %+v; want the dead letter recorded, not quarantined", st)
	}
}

// testOutagePastLimit: Postgres refuses every statement for longer than
// the deliveries last; each message's last delivery is held, unsettled and
// not quarantined, and recorded once Postgres is back: an outage of any
// length ends with every message recorded once.
func testOutagePastLimit(t *testing.T, h Harness) {
	const attempts = 3
	// JetStream's ack wait is the redelivery: long enough that a loaded
	// machine does not stall a held delivery's keep-alive (a third of it)
	// past it.
	e := newEnv(t, h, SubscriptionOptions{MaxAttempts: attempts, Redelivery: 2 * time.Second, LongPulls: true})
	ids, raws := orders("past", 5)
	e.hook.down.Store(true)
	w := e.worker(WorkerOptions{})
	e.run(w)
	for _, raw := range raws {
		e.publish(raw)
	}
	e.eventually(60*time.Second, "every message's last delivery under way", func() bool { return w.Stats().Delivered >= attempts*int64(len(ids)) })
	time.Sleep(3 * time.Second) // the held deliveries retry meanwhile (1 s, then 2 s)
	if u := e.sub.Unsettled(t); u != len(ids) {
		t.Errorf("%d messages unsettled at the broker past their delivery limit, want all %d held", u, len(ids))
	}
	// Postgres answers again, but not yet the held records' statements
	// (their connections break): a record that failed for want of
	// Postgres must not be quarantined because a quarantine got through.
	e.hook.inboxLost.Store(true)
	e.hook.down.Store(false)
	time.Sleep(4 * time.Second)
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v while the records failed for want of Postgres", q)
	}
	e.hook.inboxLost.Store(false)
	e.eventually(90*time.Second, "every message recorded, started and settled after the outage", func() bool { return e.settled(ids) })
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v after an outage past the delivery limit", q)
	}
	if st := w.Stats(); st.MaxDelivered != 0 || st.Recorded != int64(len(ids)) || st.Delivered != attempts*int64(len(ids)) {
		t.Errorf("stats %+v; want %d deliveries, %d recorded, none quarantined", st, attempts*len(ids), len(ids))
	}
}

// testOversized: a message over message.MaxSize is either refused by the
// broker at publish, or delivered and quarantined as too_large by its
// size, digest and first bytes, and settled; never started.
func testOversized(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	raw := []byte(`{"id":"evt_big","type":"order.placed","data":{"pad":"` + strings.Repeat("x", message.MaxSize) + `"}}`)
	w := e.worker(WorkerOptions{})
	e.run(w)
	if err := e.sub.Publish(t, raw); err != nil {
		t.Logf("the broker refused the %d-byte publish: %v", len(raw), err)
		return
	}
	e.eventually(30*time.Second, "the oversized message quarantined and settled", func() bool {
		return e.quarantine()[store.ReasonTooLarge] == 1 && e.sub.Unsettled(t) == 0
	})
	q := e.quarantineRows()[0]
	if q.size != int64(len(raw)) || len(q.raw) > message.MaxSize || string(q.raw) != string(raw[:len(q.raw)]) {
		t.Errorf("quarantine row: size %d, %d bytes kept; want size %d and a prefix", q.size, len(q.raw), len(raw))
	}
	if n := len(e.tc.Starts()); n != 0 {
		t.Errorf("%d workflows started for an oversized message", n)
	}
}

// testTwoWorkers: two worker processes share the subscription; each
// message is recorded and started once, every copy is settled, and both
// workers took a share.
func testTwoWorkers(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("two", 100)
	a, b := e.worker(WorkerOptions{}), e.worker(WorkerOptions{})
	e.run(a)
	e.run(b)
	for _, raw := range raws {
		e.publish(raw)
		e.publish(raw)
	}
	e.eventually(90*time.Second, "every message recorded, started and settled", func() bool { return e.settled(ids) })
	sa, sb := a.Stats(), b.Stats()
	if sa.Recorded+sb.Recorded != 100 || sa.Duplicates+sb.Duplicates != 100 {
		t.Errorf("stats %+v and %+v; want 100 recorded and 100 duplicates between them", sa, sb)
	}
	if sa.Delivered == 0 || sb.Delivered == 0 {
		t.Errorf("deliveries %d and %d: one worker got nothing of a shared subscription", sa.Delivered, sb.Delivered)
	}
}

// testHandover: a second worker joins (a rebalance) and the first one
// leaves (a consumer cancel) while messages flow; nothing is lost or
// recorded twice. A Dispatcher runs, as in every worker process: the
// leaving worker's queued fast-path starts are left to it.
func testHandover(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	e.dispatch()
	ids, raws := orders("handover", 60)
	a := e.worker(WorkerOptions{})
	stopA := e.run(a)
	for _, raw := range raws[:30] {
		e.publish(raw)
	}
	e.eventually(30*time.Second, "the first worker under way", func() bool { return a.Stats().Delivered >= 5 })
	b := e.worker(WorkerOptions{})
	e.run(b)
	for _, raw := range raws[30:45] {
		e.publish(raw)
	}
	stopA()
	for _, raw := range raws[45:] {
		e.publish(raw)
	}
	e.eventually(90*time.Second, "every message recorded, started and settled after the handover", func() bool { return e.settled(ids) })
	if q := e.quarantine(); len(q) != 0 {
		t.Errorf("quarantined %v", q)
	}
}

// testOrdering: where the broker promises order (one partition, one
// ordering key), the inbox records the messages in publish order.
func testOrdering(t *testing.T, h Harness) {
	e := newEnv(t, h, defaultSub)
	ids, raws := orders("order", 50)
	for _, raw := range raws {
		e.publish(raw)
	}
	e.run(e.worker(WorkerOptions{}))
	e.eventually(60*time.Second, "every message recorded, started and settled", func() bool { return e.settled(ids) })
	rows := e.inbox()
	for i := 1; i < len(ids); i++ {
		if rows[ids[i]].receivedAt.Before(rows[ids[i-1]].receivedAt) {
			t.Errorf("%s recorded before %s, published after it", ids[i], ids[i-1])
		}
	}
}
