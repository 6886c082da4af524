package store_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/effectively/effectively/tools/storetest"
)

// Migration 00022 goes down and up again: down, the pending state and the
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
