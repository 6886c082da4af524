package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/store"
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
	initdb, err := findPGBinary("initdb")
	if err != nil {
		return "", errors.New(`no Postgres server answers at 127.0.0.1:5432 and no PostgreSQL binaries were found.
Either start a server (Debian/Ubuntu: apt-get install postgresql && pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start),
or set DATABASE_URL to one you have (postgres://USER:PASSWORD@HOST:5432/effectively)`)
	}
	pgCtl := filepath.Join(filepath.Dir(initdb), "pg_ctl")
	dir := filepath.Join(s.state, "pg")
	addr, err := freeAddr("127.0.0.1:54329")
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	// initdb and postgres refuse to run as root: run them as "postgres".
	var prefix []string
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return "", errors.New("running as root, and there is no 'postgres' user to run a private PostgreSQL cluster as: set DATABASE_URL")
		}
		prefix = []string{"runuser", "-u", "postgres", "--"}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		step(s.out, "creating a private PostgreSQL cluster in %s", dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		if len(prefix) > 0 {
			if err := exec.CommandContext(ctx, "chown", "-R", "postgres", dir).Run(); err != nil {
				return "", fmt.Errorf("chown %s: %w", dir, err)
			}
		}
		if out, err := runAs(ctx, prefix, initdb, "-D", dir, "-U", "postgres", "--auth=trust").CombinedOutput(); err != nil {
			return "", fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}
	step(s.out, "starting the private PostgreSQL cluster on %s", addr)
	logFile := filepath.Join(dir, "server.log")
	opts := fmt.Sprintf("-p %s -k %s -c listen_addresses=127.0.0.1", port, dir)
	if out, err := runAs(ctx, prefix, pgCtl, "-D", dir, "-o", opts, "-l", logFile, "-w", "start").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pg_ctl start: %w\n%s", err, out)
	}
	s.cleanups = append(s.cleanups, func() {
		_ = runAs(context.Background(), prefix, pgCtl, "-D", dir, "-m", "fast", "-w", "stop").Run()
	})
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr), nil
}

func runAs(ctx context.Context, prefix []string, bin string, args ...string) *exec.Cmd {
	all := append(append(append([]string{}, prefix...), bin), args...)
	return exec.CommandContext(ctx, all[0], all[1:]...) //nolint:gosec // PostgreSQL's own binaries, found by findPGBinary
}

func findPGBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("%s not found", name)
}
