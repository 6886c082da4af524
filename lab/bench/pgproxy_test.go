package bench

import (
	"context"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/tools/storetest"
)

// TestPGProxyCountsWhatPostgresCounts runs known transactions through the
// proxy — implicit ones in both protocols, a prepared statement, an
// explicit commit, an explicit rollback, a failed statement, a failed
// explicit transaction — and checks the proxy's counts against the
// statements, then against pg_stat_database once the connection has
// closed and its backend published its counts.
func TestPGProxyCountsWhatPostgresCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := storetest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	xact := func() (c, r int64) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&c, &r); err != nil {
			t.Fatal(err)
		}
		return c, r
	}
	time.Sleep(time.Second) // the migrations' backends publish as they exit
	c0, r0 := xact()

	p, err := startPGProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	pu, err := p.url(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pu) // the session's start: 1 commit
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`, pgx.QueryExecModeSimpleProtocol)) // 1
	must(conn.Exec(ctx, `INSERT INTO t VALUES (1)`, pgx.QueryExecModeSimpleProtocol))            // 1
	// A parameterised statement, prepared on first use: the prepare is a
	// transaction of its own, then each execution is one.
	for i := 2; i < 5; i++ {
		must(conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, i)) // 1 + 3
	}
	// A pipelined batch (one Sync) is one implicit transaction, its
	// repeated statement shown once.
	var b pgx.Batch
	for i := 5; i < 8; i++ {
		b.Queue(`INSERT INTO t VALUES ($1)`, i)
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil { // 1
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must(tx.Exec(ctx, `INSERT INTO t VALUES (10)`, pgx.QueryExecModeSimpleProtocol))
	if err := tx.Commit(ctx); err != nil { // 1
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must(tx.Exec(ctx, `INSERT INTO t VALUES (11)`, pgx.QueryExecModeSimpleProtocol))
	if err := tx.Rollback(ctx); err != nil { // rollback 1
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO t VALUES (1)`, pgx.QueryExecModeSimpleProtocol); err == nil { // rollback 1
		t.Fatal("duplicate key accepted")
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES (2)`, pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Fatal("duplicate key accepted")
	}
	_ = tx.Commit(ctx) // a failed transaction's COMMIT rolls back: rollback 1
	const wantCommits, wantRollbacks = 9, 3
	if c, r := p.commits.Load(), p.rollbacks.Load(); c != wantCommits || r != wantRollbacks {
		t.Errorf("proxy counted %d commits and %d rollbacks, want %d and %d", c, r, wantCommits, wantRollbacks)
	}
	wantShapes := map[string]int64{"connect": 1, "CREATE": 1, "INSERT t": 4, "INSERT t ×n": 1, "prepare": 1, "tx(INSERT t)": 1}
	if got := p.shapeCounts(); !maps.Equal(got, wantShapes) {
		t.Errorf("commits by shape %v, want %v", got, wantShapes)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var c1, r1 int64
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		if c1, r1 = xact(); c1-c0 >= wantCommits {
			break
		}
	}
	if c1-c0 != p.commits.Load() || r1-r0 != p.rollbacks.Load() {
		t.Errorf("pg_stat_database counted %d commits and %d rollbacks, the proxy %d and %d", c1-c0, r1-r0, p.commits.Load(), p.rollbacks.Load())
	}
}

func TestLabel(t *testing.T) {
	for sql, want := range map[string]string{
		`WITH ins AS (INSERT INTO inbox (a) VALUES ($1) ON CONFLICT DO NOTHING RETURNING *) UPDATE inbox SET duplicates = duplicates + 1 WHERE NOT EXISTS (SELECT FROM ins)`: "INSERT inbox+UPDATE inbox",
		`SELECT id FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`:                                                                       "SELECT outbox",
		`INSERT INTO orders (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET status = 'paid'`:                                                                                 "INSERT orders",
		`update "payments" set state = 'failed'`: "UPDATE payments",
		`begin`:                                  "BEGIN",
		`commit`:                                 "COMMIT",
		`SELECT clock_timestamp()`:               "SELECT",
		`SET LOCAL synchronous_commit = off`:     "SET",
		"-- ping":                                "ping",
		"-- why\n/* and how */ SELECT 1 FROM inbox": "SELECT inbox",
	} {
		if got := label(sql); got != want {
			t.Errorf("label(%.40q) = %q, want %q", sql, got, want)
		}
	}
}

func TestShapeCollapsesRepeats(t *testing.T) {
	g := "INSERT inbox+UPDATE inbox"
	for _, tc := range []struct {
		stmts []string
		want  string
	}{
		{[]string{g}, g},
		{[]string{g, g, g, "SELECT inbox"}, g + " ×n; SELECT inbox"},
		{[]string{g, "SELECT inbox", g, g}, g + "; SELECT inbox; " + g + " ×n"},
		{[]string{"BEGIN", g, g, "COMMIT"}, "tx(" + g + " ×n)"},
	} {
		if got := shape(tc.stmts, false); got != tc.want {
			t.Errorf("shape(%q) = %q, want %q", tc.stmts, got, tc.want)
		}
	}
}
