package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/temporalclient"
	"github.com/effectively/effectively/workflows"
)

// deps are the connections a command needs, built once.
type deps struct {
	pool   *pgxpool.Pool
	store  *store.Store
	tc     client.Client
	intake *intake.Intake
}

func (d *deps) close() {
	if d.tc != nil {
		d.tc.Close()
	}
	if d.pool != nil {
		d.pool.Close()
	}
}

func databaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return store.DefaultURL
}

func taskQueue() string {
	if q := os.Getenv("EFFECTIVELY_TASK_QUEUE"); q != "" {
		return q
	}
	return workflows.DefaultTaskQueue
}

// connect opens Postgres (schema applied) and, when withTemporal, Temporal.
func connect(ctx context.Context, logger *slog.Logger, withTemporal bool) (*deps, error) {
	d := &deps{}
	pool, err := store.Open(ctx, databaseURL(), store.PoolConfig{MaxConns: 8})
	if err != nil {
		return nil, err
	}
	d.pool = pool
	if err := store.Migrate(ctx, pool, nil); err != nil {
		d.close()
		return nil, err
	}
	d.store = store.New(pool)
	if !withTemporal {
		return d, nil
	}
	tc, _, err := temporalclient.Dial(ctx, logger)
	if err != nil {
		d.close()
		return nil, err
	}
	d.tc = tc
	d.intake, err = intake.New(d.store, tc, intake.Config{TaskQueue: taskQueue(), Logger: logger})
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}
