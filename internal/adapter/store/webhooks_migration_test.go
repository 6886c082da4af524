package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// Migration 00005 leaves exactly one state check per column, with the states
// of the second round (processing, unexpected; delivered, bounced, dropped),
// whatever 00004 did before it: it drops every check on the column by
// definition, not by name.
func TestMigration00005StateChecks(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	count := func(table, column string) int {
		var n int
		if err := pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
			 WHERE r.relname = $1 AND c.contype = 'c' AND pg_get_constraintdef(c.oid) ~ ('\m' || $2 || '\M')`, table, column).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range [][2]string{{"payments", "state"}, {"effects", "state"}, {"orders", "receipt_status"}} {
		if n := count(tc[0], tc[1]); n != 1 {
			t.Errorf("%s.%s has %d check constraints, want 1", tc[0], tc[1], n)
		}
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO orders (id, amount, currency, message_id, receipt_status) VALUES (1, 100, 'usd', 'm1', 'delivered'), (2, 100, 'usd', 'm2', 'bounced'), (3, 100, 'usd', 'm3', 'dropped');
		INSERT INTO payments (order_id, consumer, message_id, idempotency_key, amount, currency, state) VALUES
		       (1, 'c', 'm1', 'payment:m1', 100, 'usd', 'processing'), (2, 'c', 'm2', 'payment:m2', 100, 'usd', 'unexpected');
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim) VALUES
		       ('payment:m1', 'payment', 'c', 'm1', 'h', 'processing', 1), ('payment:m2', 'payment', 'c', 'm2', 'h', 'unexpected', 1)`); err != nil {
		t.Fatalf("the second round's states are refused: %v", err)
	}
	for _, bad := range []string{
		`UPDATE payments SET state = 'in_flight' WHERE order_id = 1`,
		`UPDATE effects SET state = 'bogus' WHERE key = 'payment:m1'`,
		`UPDATE orders SET receipt_status = 'opened' WHERE id = 1`,
	} {
		if _, err := pool.Exec(ctx, bad); err == nil {
			t.Errorf("accepted: %s", bad)
		}
	}
}

// The same on top of a 00004 like H1's (processing and unexpected added
// under constraint names of its own): 00005 replaces them, and the result
// is one check per column.
func TestMigration00005AfterA00004(t *testing.T) {
	ctx := context.Background()
	// A schema of its own in a fresh database: the migrations run from the
	// start there, with a synthetic 00004.
	url := storetest.NewDatabase(t)
	admin, err := store.Open(ctx, url, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `CREATE SCHEMA h1sim`); err != nil {
		t.Fatal(err)
	}
	pool, err := store.Open(ctx, url+"&search_path=h1sim", store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	files := fstest.MapFS{}
	for _, name := range []string{"00001_core.sql", "00002_intake_retention.sql", "00003_claim_token.sql", "00005_webhooks.sql"} {
		b, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = &fstest.MapFile{Data: b}
	}
	files["00004_like_h1.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
ALTER TABLE payments DROP CONSTRAINT payments_state_check;
ALTER TABLE payments ADD CONSTRAINT payments_state_allowed CHECK (state IN ('claimed', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));
ALTER TABLE effects DROP CONSTRAINT effects_state_check;
ALTER TABLE effects ADD CONSTRAINT effects_state_allowed CHECK (state IN ('claimed', 'in_flight', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));
ALTER TABLE payments ADD COLUMN confirmed_at timestamptz;
-- +goose Down
`)}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, err := pool.Query(ctx, `
		SELECT c.conname FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
		 WHERE r.relname IN ('payments', 'effects') AND r.relnamespace = 'h1sim'::regnamespace
		   AND c.contype = 'c' AND pg_get_constraintdef(c.oid) ~ '\mstate\M'
		 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if got := strings.Join(names, ","); got != "effects_state_check,payments_state_check" {
		t.Fatalf("state checks after 00004 and 00005: %s, want effects_state_check,payments_state_check", got)
	}
}
