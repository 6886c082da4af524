package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/config"
)

// TestWarnInsecureDatabase: a Postgres beyond loopback with sslmode=disable
// is named in a warning at start, without the password; the loopback
// default is not.
func TestWarnInsecureDatabase(t *testing.T) {
	for dsn, warn := range map[string]bool{
		"postgres://u:pw_db_secret@db.internal:5432/effectively?sslmode=disable":     true,
		"postgres://u:pw_db_secret@db.internal:5432/effectively?sslmode=verify-full": false,
		"postgres://postgres@127.0.0.1:5432/effectively?sslmode=disable":             false,
	} {
		cfg, err := config.Load(func(k string) (string, bool) {
			if k == "DATABASE_URL" {
				return dsn, true
			}
			return "", false
		})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		warnInsecureDatabase(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
		out := buf.String()
		if got := strings.Contains(out, "level=WARN") && strings.Contains(out, "db.internal") && strings.Contains(out, "variable=DATABASE_URL"); got != warn {
			t.Errorf("DATABASE_URL=%s: warned %v, want %v:\n%s", dsn, got, warn, out)
		}
		if strings.Contains(out, "pw_db_secret") {
			t.Errorf("the warning holds the password: %s", out)
		}
	}
}
