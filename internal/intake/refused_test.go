package intake_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
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
	// Nothing listens on port 1: every statement fails to connect.
	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	held, err := intake.New(store.New(down), testenv.NewFakeTemporal(), intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if v := deadLetter(held, 2*time.Second); v.Settle != intake.SettleRetry {
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
