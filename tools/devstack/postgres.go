package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/pgserver"
)

// postgres returns the connection string of the database to use: the one in
// DATABASE_URL (used as it is), else a fresh effectively_<instance> database
// (devstack owns it and recreates it on each run) on the
// server at 127.0.0.1:5432, else one on a private cluster that devstack starts
// in .devstack/pg when the machine has PostgreSQL's binaries.
func (s *stack) postgres(ctx context.Context, fresh bool) (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		step(s.out, "using Postgres from DATABASE_URL")
		if err := ensureDatabase(ctx, u, false); err != nil {
			return "", err
		}
		return u, nil
	}
	devDatabase := "effectively_" + s.instance
	server := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	if err := ping(ctx, server); err != nil {
		step(s.out, "no Postgres answers at 127.0.0.1:5432 (%v)", err)
		server, err = s.privateCluster(ctx)
		if err != nil {
			return "", err
		}
	} else {
		step(s.out, "using Postgres at 127.0.0.1:5432, database %s", devDatabase)
	}
	u, err := store.WithDatabase(server, devDatabase)
	if err != nil {
		return "", err
	}
	if err := ensureDatabase(ctx, u, fresh); err != nil {
		return "", err
	}
	return u, nil
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// ensureDatabase creates the database of u if it does not exist (dropping it
// first when fresh) and applies the schema.
func ensureDatabase(ctx context.Context, u string, fresh bool) error {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	name := cfg.Database
	adminURL, err := store.WithDatabase(u, "postgres")
	if err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err == nil {
		defer admin.Close(ctx)
		ident := pgx.Identifier{name}.Sanitize()
		if fresh {
			if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
				return fmt.Errorf("drop %s: %w", name, err)
			}
		}
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
				return fmt.Errorf("create database %s: %w", name, err)
			}
		}
	}
	pool, err := store.Open(ctx, u, store.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	return store.Migrate(ctx, pool, nil)
}

// privateCluster starts a throwaway cluster in .devstack/pg with the
// machine's PostgreSQL binaries.
func (s *stack) privateCluster(ctx context.Context) (string, error) {
	port := 54329
	if addr, err := freeAddr("127.0.0.1:54329"); err == nil {
		_, p, _ := net.SplitHostPort(addr)
		port, _ = strconv.Atoi(p)
	}
	dir := filepath.Join(s.state, "pg")
	step(s.out, "starting a private PostgreSQL cluster in %s on port %d", dir, port)
	srv, err := pgserver.Start(ctx, dir, port)
	if errors.Is(err, pgserver.ErrNoBinaries) {
		return "", errors.New(`no Postgres server answers at 127.0.0.1:5432 and no PostgreSQL binaries were found.
Either start a server (Debian/Ubuntu: apt-get install postgresql && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start),
or set DATABASE_URL to one you have (postgres://USER:PASSWORD@HOST:5432/effectively)`)
	}
	if err != nil {
		return "", err
	}
	s.cleanups = append(s.cleanups, func() { _ = srv.Stop(context.Background()) })
	return srv.URL("postgres"), nil
}
