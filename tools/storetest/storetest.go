// Package storetest gives each test its own freshly migrated Postgres
// database, so tests never depend on leftovers and commit semantics are real.
//
// The server is found through TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). A server that
// does not answer fails the test: it is never skipped.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
)

// AdminURL is the connection string of the maintenance database used to
// create and drop test databases.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewDatabase creates an empty, migrated database for t, drops it when t
// ends, and returns its connection string.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("storetest: Postgres is required for this test and did not answer at TEST_DATABASE_URL (%s): %v", AdminURL(), err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "effectively_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("storetest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("storetest: drop %s: %v", name, err)
		}
	})
	url, err := store.WithDatabase(AdminURL(), name)
	if err != nil {
		t.Fatalf("storetest: TEST_DATABASE_URL: %v", err)
	}

	pool, err := store.Open(ctx, url, store.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatalf("storetest: open %s: %v", name, err)
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("storetest: migrate %s: %v", name, err)
	}
	return url
}

// NewPool is NewDatabase plus an open pool, closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewDatabase(t)
	pool, err := store.Open(context.Background(), url, store.PoolConfig{})
	if err != nil {
		t.Fatalf("storetest: open: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
