package store_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/effectively/effectively/tools/storetest"
)

// Migration 00022 goes down (refused while a refund is pending) and up again: down, the pending state and the
// refund_pending outcome are refused again; up, they are accepted.
func TestMigration00022DownAndUp(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	accepts := func() bool {
		_, err := pool.Exec(ctx, `DO $$ BEGIN
			INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ('c', 'm', 'refund_pending', 1);
			RAISE EXCEPTION 'rollback';
		END $$`)
		return err != nil && err.Error() == "ERROR: rollback (SQLSTATE P0001)"
	}
	if !accepts() {
		t.Fatal("refund_pending refused after the migration")
	}
	// Refused while a refund is pending: an earlier release would take it
	// for refunded.
	if _, err := pool.Exec(ctx, `INSERT INTO processed_messages (consumer, message_id, outcome, order_id) VALUES ('c', 'm', 'refund_pending', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 21); err == nil || !strings.Contains(err.Error(), "refunds are pending") {
		t.Fatalf("down to 21 with a refund pending: %v; want it refused", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM processed_messages WHERE message_id = 'm'`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 21); err != nil {
		t.Fatalf("down to 21: %v", err)
	}
	if accepts() {
		t.Fatal("refund_pending accepted after 00022 went down")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if !accepts() {
		t.Fatal("refund_pending refused after 00022 came up again")
	}
}
