package intake_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestRefusedTellsARefusalFromAnOutage: only Postgres' answer to the
// statement itself lets a held last delivery be quarantined; an error of
// reaching it, or a transient answer, keeps it held for the record.
func TestRefusedTellsARefusalFromAnOutage(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"a raised exception (a trigger)":   {&pgconn.PgError{Code: "P0001"}, true},
		"a check violation, wrapped":       {fmt.Errorf("record message m: %w", &pgconn.PgError{Code: "23514"}), true},
		"an undefined table (a migration)": {&pgconn.PgError{Code: "42P01"}, true},
		"a closed connection":              {fmt.Errorf("insert 1 inbox rows: %w", net.ErrClosed), false},
		"a connection failure":             {&pgconn.PgError{Code: "08006"}, false},
		"a deadlock":                       {&pgconn.PgError{Code: "40P01"}, false},
		"too many connections":             {&pgconn.PgError{Code: "53300"}, false},
		"an admin shutdown":                {&pgconn.PgError{Code: "57P01"}, false},
		"a statement timeout":              {&pgconn.PgError{Code: "57014"}, false},
		"a lock not available":             {&pgconn.PgError{Code: "55P03"}, false},
		"a read-only server (failover)":    {&pgconn.PgError{Code: "25006"}, false},
		"a stale cached plan (migration)":  {&pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}, false},
		"a feature not supported":          {&pgconn.PgError{Code: "0A000", Message: "unsupported"}, true},
		"a plain error":                    {errors.New("context deadline exceeded"), false},
	}
	for name, tt := range tests {
		if got := intake.Refused(tt.err); got != tt.want {
			t.Errorf("%s (%v): refused = %v, want %v", name, tt.err, got, tt.want)
		}
	}
}

// TestDeadLetterHeldIsNotCounted: a dead letter whose record cannot reach
// Postgres is held, and handed back when the worker stops (SettleRetry),
// to be taken up again. Only the take that settles it counts, and a copy
// of it is not counted again, so that the dead-letter counter counts
// messages, not tries.
func TestDeadLetterHeldIsNotCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	deadLetter := func(in *intake.Intake, wait time.Duration) intake.Verdict {
		t.Helper()
		p, err := intake.NewPath(in, intake.PathConfig{Source: "fake", Logger: testenv.Logger(t), Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		p.Open(ctx)
		defer p.Close()
		s := &settled{}
		return p.DeadLetter(ctx, s.delivery(placed("evt_dl_held", 7), 3, false), time.Now(), "test")
	}
	if v := deadLetter(testenv.UnreachableIntake(t), 2*time.Second); v.Settle != intake.SettleRetry {
		t.Fatalf("with Postgres unreachable the dead letter was settled %s, want it handed back (retry)", v.Settle)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 0 {
		t.Errorf("%s = %v after a take handed back, want 0", metrics.NameDeadLetters, n)
	}
	up := newHarness(t).in
	if v := deadLetter(up, 30*time.Second); v.Settle != intake.SettleAck {
		t.Fatalf("the dead letter taken up again was settled %s, want ack (recorded)", v.Settle)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 1 {
		t.Errorf("%s = %v after it was recorded, want 1", metrics.NameDeadLetters, n)
	}
	// A copy of the dead letter (JetStream hands one over again when the
	// dead-letter stream's leader is lost before the ack) finds the
	// message in the inbox, and is not a second dead letter.
	if v := deadLetter(up, 30*time.Second); v.Settle != intake.SettleAck || !v.Copy {
		t.Fatalf("a copy of the dead letter: settled %s, copy %v; want ack, a copy", v.Settle, v.Copy)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 1 {
		t.Errorf("%s = %v after a copy of the dead letter, want still 1", metrics.NameDeadLetters, n)
	}
}

// TestDeadLetterOfAHeldDeliveryWaitsForIt: the broker gives up on a last
// delivery whose keep-alives came late while this process still holds it
// (the inbox refuses it, so the hold quarantines it). Its dead letter
// waits for the hold and, the hold having committed the message, is a
// copy: one delivery counted, no dead letter counted. So is one that comes
// just after the hold ended. When the hold ends
// without committing (the worker stops while Postgres is unreachable), the
// dead letter is not acked as a copy: it is handed back, to be taken up
// again, and so nothing is lost.
func TestDeadLetterOfAHeldDeliveryWaitsForIt(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	h := newHarness(t)
	raw := placed("evt_held_dl", 8)
	testenv.RefuseInbox(t, h.db, "evt_held_dl")
	p, err := intake.NewPath(h.in, intake.PathConfig{Source: "fake", Logger: testenv.Logger(t), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.Open(ctx)
	defer p.Close()
	held := make(chan intake.Verdict, 1)
	go func() {
		s := &settled{}
		held <- p.Handle(ctx, s.delivery(raw, 3, true))
	}()
	testenv.Eventually(t, 10*time.Second, "the last delivery held", func() bool { return h.in.Holds(raw) })
	s := &settled{}
	v := p.DeadLetter(ctx, s.delivery(raw, 4, false), time.Now(), "test")
	hv := <-held
	if hv.Settle != intake.SettleQuarantined {
		t.Fatalf("the held delivery was settled %s, want quarantined", hv.Settle)
	}
	if v.Settle != intake.SettleAck || !v.Copy || v.Result.QuarantineID != hv.Result.QuarantineID {
		t.Errorf("its dead letter: settled %s, copy %v, quarantine %d; want ack, a copy of quarantine %d", v.Settle, v.Copy, v.Result.QuarantineID, hv.Result.QuarantineID)
	}
	if len(s.got) != 1 || s.got[0].Settle != intake.SettleAck {
		t.Errorf("the dead letter's settles %+v, want one ack", s.got)
	}
	if st := p.Stats(); st.Delivered != 1 || st.MaxDelivered != 1 {
		t.Errorf("stats %+v; want 1 delivery, 1 quarantined", st)
	}
	if n := testenv.CounterSum(t, reg, metrics.NameDeadLetters, nil); n != 0 {
		t.Errorf("%s = %v for a copy of a held delivery, want 0", metrics.NameDeadLetters, n)
	}
	if q := h.quarantineRows(t); len(q) != 1 {
		t.Errorf("quarantine %+v, want one row", q)
	}
	// The dead letter can also come just after the hold settled.
	if v := p.DeadLetter(ctx, (&settled{}).delivery(raw, 4, false), time.Now(), "test"); v.Settle != intake.SettleAck || !v.Copy {
		t.Errorf("a dead letter after the hold ended: settled %s, copy %v; want ack, a copy", v.Settle, v.Copy)
	}
	if st := p.Stats(); st.Delivered != 1 || st.MaxDelivered != 1 {
		t.Errorf("stats %+v after the later dead letter; want still 1 delivery, 1 quarantined", st)
	}

	// A hold that ends without committing: Postgres unreachable, the
	// worker stopping.
	in := testenv.UnreachableIntake(t)
	dp, err := intake.NewPath(in, intake.PathConfig{Source: "fake", Logger: testenv.Logger(t), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	stopping, stop := context.WithCancel(context.Background())
	dp.Open(stopping)
	defer dp.Close()
	go func() {
		s := &settled{}
		held <- dp.Handle(stopping, s.delivery(raw, 3, true))
	}()
	testenv.Eventually(t, 10*time.Second, "the last delivery held", func() bool { return in.Holds(raw) })
	dlctx, dlcancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer dlcancel()
	time.AfterFunc(time.Second, stop)
	if v := dp.DeadLetter(dlctx, (&settled{}).delivery(raw, 4, false), time.Now(), "test"); v.Settle != intake.SettleRetry || v.Copy {
		t.Errorf("the dead letter of a hold that did not commit: settled %s, copy %v; want handed back (retry)", v.Settle, v.Copy)
	}
	if hv := <-held; hv.Settle != intake.SettleRetry {
		t.Errorf("the hold with Postgres unreachable was settled %s, want handed back (retry)", hv.Settle)
	}
}

// TestGiveUpSeenByTwoWorkersCountsOnce: one worker holds a message's last
// delivery (the inbox refuses it) while its dead letter goes to another
// worker, which handles it as a last delivery too. Both quarantine it as
// max_deliver, one row; whichever commits second finds the row and counts
// a copy, so the two processes' metrics count the give-up once, in either
// order.
func TestGiveUpSeenByTwoWorkersCountsOnce(t *testing.T) {
	db := storetest.NewPool(t)
	testenv.RefuseInbox(t, db, "evt_two_give_up")
	type worker struct {
		reg *prometheus.Registry
		p   *intake.Path
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newWorker := func() worker {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		in, err := intake.New(store.New(db), testenv.NewFakeTemporal(), intake.Config{Logger: testenv.Logger(t), Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		p, err := intake.NewPath(in, intake.PathConfig{Source: "fake", Logger: testenv.Logger(t), Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		p.Open(ctx)
		t.Cleanup(p.Close)
		return worker{reg, p}
	}
	// counts is what w's metrics and stats say of the give-up.
	counts := func(w worker) string {
		st := w.p.Stats()
		return fmt.Sprintf("max_deliver %v (stats %d), duplicate %v (stats %d), dead letters %v",
			testenv.CounterSum(t, w.reg, metrics.NameIntakeDecisions, map[string]string{"decision": "max_deliver"}), st.MaxDelivered,
			testenv.CounterSum(t, w.reg, metrics.NameIntakeDecisions, map[string]string{"decision": "duplicate"}), st.Duplicates,
			testenv.CounterSum(t, w.reg, metrics.NameDeadLetters, nil))
	}
	const once, copied = "max_deliver 1 (stats 1), duplicate 0 (stats 0), dead letters 0", "max_deliver 0 (stats 0), duplicate 1 (stats 1), dead letters 0"

	// The hold commits first; the dead letter on the other worker is a copy.
	a, b := newWorker(), newWorker()
	raw := placed("evt_two_give_up", 8)
	hv := a.p.Handle(ctx, (&settled{}).delivery(raw, 3, true))
	dv := b.p.DeadLetter(ctx, (&settled{}).delivery(raw, 4, false), time.Now(), "test")
	if hv.Settle != intake.SettleQuarantined || hv.Copy || dv.Settle != intake.SettleQuarantined || !dv.Copy || dv.Result.QuarantineID != hv.Result.QuarantineID {
		t.Errorf("the hold: %s, copy %v, quarantine %d; the dead letter: %s, copy %v, quarantine %d; want both quarantined, the dead letter a copy of the hold's row",
			hv.Settle, hv.Copy, hv.Result.QuarantineID, dv.Settle, dv.Copy, dv.Result.QuarantineID)
	}
	if got := counts(a); got != once {
		t.Errorf("the holding worker counted %s; want %s", got, once)
	}
	if got := counts(b); got != copied {
		t.Errorf("the dead letter's worker counted %s; want %s", got, copied)
	}

	// The dead letter commits first; the hold on the other worker is a copy.
	a, b = newWorker(), newWorker()
	raw = placed("evt_two_give_up", 9)
	dv = b.p.DeadLetter(ctx, (&settled{}).delivery(raw, 4, false), time.Now(), "test")
	hv = a.p.Handle(ctx, (&settled{}).delivery(raw, 3, true))
	if dv.Settle != intake.SettleQuarantined || dv.Copy || hv.Settle != intake.SettleQuarantined || !hv.Copy || dv.Result.QuarantineID != hv.Result.QuarantineID {
		t.Errorf("the dead letter: %s, copy %v, quarantine %d; the hold: %s, copy %v, quarantine %d; want both quarantined, the hold a copy of the dead letter's row",
			dv.Settle, dv.Copy, dv.Result.QuarantineID, hv.Settle, hv.Copy, hv.Result.QuarantineID)
	}
	if got, want := counts(b), "max_deliver 1 (stats 1), duplicate 0 (stats 0), dead letters 1"; got != want {
		t.Errorf("the dead letter's worker counted %s; want %s", got, want)
	}
	if got := counts(a); got != copied {
		t.Errorf("the holding worker counted %s; want %s", got, copied)
	}

	var rows, copies int
	if err := db.QueryRow(ctx, `SELECT count(*), sum(copies) FROM quarantine WHERE message_id = 'evt_two_give_up'`).Scan(&rows, &copies); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || copies != 4 {
		t.Errorf("%d quarantine rows with %d copies, want 2 rows (one a payload) of 2 copies each", rows, copies)
	}
}
