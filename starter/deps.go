package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
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

// connect opens Postgres and, when withTemporal, Temporal. It never changes
// the schema: a schema that is missing or older than this binary's is an
// error wrapping store.ErrSchemaBehind that names the command to run.
func connect(ctx context.Context, cfg config.Config, logger *slog.Logger, withTemporal bool) (*deps, error) {
	d := &deps{}
	pool, err := store.Open(ctx, cfg.DatabaseURL, store.PoolConfig{MaxConns: 8})
	if err != nil {
		return nil, err
	}
	d.pool = pool
	if err := store.CheckSchema(ctx, pool); err != nil {
		d.close()
		return nil, err
	}
	d.store = store.New(pool)
	if withTemporal {
		if err := d.dialTemporal(ctx, cfg, logger); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// withStore runs fn on a store of cfg's database (no Temporal): the
// commands that read or mark rows in Postgres only.
func withStore(ctx context.Context, cfg config.Config, logger *slog.Logger, fn func(*store.Store) (int, error)) (int, error) {
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	return fn(d.store)
}

// dialTemporal connects to Temporal and builds the intake on it.
func (d *deps) dialTemporal(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	tc, _, err := temporalclient.Dial(ctx, cfg.Temporal, logger)
	if err != nil {
		return err
	}
	d.tc = tc
	d.intake, err = intake.New(d.store, tc, intake.Config{TaskQueue: cfg.TaskQueue, Logger: logger})
	return err
}
