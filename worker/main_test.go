package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestMigrateCommand runs `worker migrate` against a database without the
// schema: it applies every migration and exits 0 without needing the
// provider keys or Temporal, so the starter's schema check then passes.
func TestMigrateCommand(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [5]byte
	_, _ = rand.Read(b[:])
	name := "effectively_test_migrate_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	db, err := store.WithDatabase(storetest.AdminURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", db)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")

	pool, err := store.Open(ctx, db, store.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.CheckSchema(ctx, pool); !errors.Is(err, store.ErrSchemaBehind) {
		t.Fatalf("before: CheckSchema = %v, want ErrSchemaBehind", err)
	}
	if code := run([]string{"migrate"}); code != 0 {
		t.Fatalf("worker migrate: exit %d, want 0", code)
	}
	if err := store.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("after worker migrate: %v", err)
	}
	if code := run([]string{"migrate"}); code != 0 {
		t.Fatalf("worker migrate again: exit %d, want 0 (nothing to do)", code)
	}
	if code := run([]string{"migrat"}); code != 2 {
		t.Fatalf("worker migrat: exit %d, want 2 (usage)", code)
	}
}

// TestHelp: `worker -h` prints the usage as text on standard output and
// exits 0; an unknown argument prints it on standard error and exits 2.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "help"} {
		out := captureStdout(t, func() {
			if code := run([]string{arg}); code != 0 {
				t.Errorf("worker %s: exit %d, want 0", arg, code)
			}
		})
		if !strings.HasPrefix(out, "usage:\n") || !strings.Contains(out, "worker migrate") || !strings.Contains(out, "docs/configuration.md") {
			t.Errorf("worker %s printed %q, want the usage text", arg, out)
		}
	}
	if code := run([]string{"--verbose"}); code != 2 {
		t.Fatalf("worker --verbose: exit %d, want 2", code)
	}
}

func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = saved }()
	fn()
	_ = w.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
