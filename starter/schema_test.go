package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// emptyDatabase creates a database with no schema at all, dropped when t
// ends, and returns its URL.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := "effectively_test_empty_" + randomHex(t)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), storetest.AdminURL())
		if err != nil {
			t.Log(err)
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := store.WithDatabase(storetest.AdminURL(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func randomHex(t *testing.T) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// exec runs SQL against dbURL as its own user.
func exec(t *testing.T, dbURL, sql string) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func tableCount(t *testing.T, dbURL string) int {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStarterNeverChangesTheSchema points every starter command at a
// database without the schema, and at one a migration behind: each exits
// with exitSchema, names `worker migrate`, and leaves the database as it
// was (no table created).
func TestStarterNeverChangesTheSchema(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1") // never reached: the schema check comes first
	t.Setenv("NATS_URL", "off")
	commands := [][]string{
		{"status", "evt_none"},
		{"quarantine", "list"},
		{"quarantine", "retry", "1"},
		{"send", "-"},
	}
	t.Run("missing", func(t *testing.T) {
		db := emptyDatabase(t)
		t.Setenv("DATABASE_URL", db)
		for _, args := range commands {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			if code != exitSchema || !strings.Contains(stderr.String(), "run `worker migrate`") || !strings.Contains(stderr.String(), "no effectively schema") {
				t.Errorf("%v: exit %d, stderr %q; want exit %d naming `worker migrate`", args, code, stderr.String(), exitSchema)
			}
		}
		if n := tableCount(t, db); n != 0 {
			t.Errorf("the starter created %d tables in a database it only reads", n)
		}
	})
	t.Run("older", func(t *testing.T) {
		db := storetest.NewDatabase(t)
		exec(t, db, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
		t.Setenv("DATABASE_URL", db)
		want := "the database schema is at version " // then have and want
		for _, args := range commands {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			if code != exitSchema || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "worker migrate") {
				t.Errorf("%v: exit %d, stderr %q; want exit %d, %q…", args, code, stderr.String(), exitSchema, want)
			}
		}
	})
	t.Run("gap", func(t *testing.T) {
		db := storetest.NewDatabase(t)
		exec(t, db, `DELETE FROM goose_db_version WHERE version_id = 2`)
		t.Setenv("DATABASE_URL", db)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"status", "evt_none"}, nil, &stdout, &stderr)
		if code != exitSchema || !strings.Contains(stderr.String(), "lacks migrations [2]") {
			t.Errorf("exit %d, stderr %q; want exit %d naming migration 2", code, stderr.String(), exitSchema)
		}
	})
}

// TestReadCommandsWorkWithAReadOnlyRole runs the starter's read commands
// as a role that may only connect and SELECT: an operator's role.
func TestReadCommandsWorkWithAReadOnlyRole(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewDatabase(t)
	pool, err := store.Open(ctx, db, store.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := store.New(pool)
	qid, err := st.Quarantine(ctx, store.QuarantineEntry{Source: "starter", Raw: []byte(`{"id":"evt_ro_bad"}`), Reason: store.ReasonInvalid, Detail: "invalid message: type: missing"})
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte(`{"id":"evt_ro","type":"order.placed","data":{}}`)
	if _, err := st.InsertInbox(ctx, store.InboxEntry{Consumer: message.ConsumerOrderPlaced, MessageID: "evt_ro", Payload: raw, PayloadHash: "h", Source: "starter"}); err != nil {
		t.Fatal(err)
	}
	// A copy of evt_ro with another payload: a quarantine row that names
	// the message, which status must show.
	mid, err := st.Quarantine(ctx, store.QuarantineEntry{Source: "starter", Consumer: message.ConsumerOrderPlaced, MessageID: "evt_ro",
		Raw: []byte(`{"id":"evt_ro","type":"order.placed","data":{"x":1}}`), Reason: store.ReasonPayloadMismatch, Detail: "payload mismatch"})
	if err != nil {
		t.Fatal(err)
	}

	// An open payment for `payments` to list.
	exec(t, db, `INSERT INTO orders (id, amount, currency, message_id) VALUES (4711, 500, 'eur', 'evt_ro_pay');
		INSERT INTO payments (order_id, consumer, message_id, idempotency_key, state, amount, currency)
		VALUES (4711, 'order-placed', 'evt_ro_pay', 'payment:evt_ro_pay', 'unknown', 500, 'eur')`)

	role := "effectively_ro_" + randomHex(t)
	dbName := strings.TrimPrefix(mustParse(t, db).Path, "/")
	exec(t, db, `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
		REVOKE ALL ON DATABASE `+dbName+` FROM PUBLIC;
		REVOKE CREATE ON SCHEMA public FROM PUBLIC;
		GRANT CONNECT ON DATABASE `+dbName+` TO `+role+`;
		GRANT USAGE ON SCHEMA public TO `+role+`;
		GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+role)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), db)
		if err != nil {
			t.Log(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role); err != nil {
			t.Log(err)
		}
	})
	u := mustParse(t, db)
	u.User = url.User(role)
	roURL := u.String()

	// The role really is read-only.
	c, err := pgx.Connect(ctx, roURL)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := c.Exec(ctx, `UPDATE quarantine SET retry_count = 1`)
	_, cerr := c.Exec(ctx, `CREATE TABLE ro_probe (x int)`)
	c.Close(ctx)
	if werr == nil || cerr == nil || !strings.Contains(werr.Error(), "permission denied") {
		t.Fatalf("the test role can write (update: %v, create: %v)", werr, cerr)
	}

	t.Setenv("DATABASE_URL", roURL)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1") // status reports Temporal unreachable and carries on
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "evt_ro"}, `"id": ` + itoa(mid) + `,`},
		{[]string{"quarantine", "list"}, `"id":` + itoa(qid) + `,`},
		{[]string{"payments", "--state", "unknown"}, `"message_id":"evt_ro_pay"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, tt.args, nil, &stdout, &stderr)
		if code != exitOK || !strings.Contains(stdout.String(), tt.want) {
			t.Errorf("%v as a read-only role: exit %d, stdout %q, stderr %q; want exit 0 and %q", tt.args, code, stdout.String(), stderr.String(), tt.want)
		}
		if strings.Contains(stderr.String(), "permission denied") {
			t.Errorf("%v: %s", tt.args, stderr.String())
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestQuarantineRetryRefusesATruncatedMessage: a message quarantined as
// too_large kept only its first bytes; sending those again would quarantine
// a different, broken message, so the retry refuses and says why.
func TestQuarantineRetryRefusesATruncatedMessage(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewDatabase(t)
	pool, err := store.Open(ctx, db, store.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := store.New(pool).Quarantine(ctx, store.QuarantineEntry{
		Source: "starter", Raw: []byte(`{"id":"evt_big","pad":"aaaa`), Size: 70000, SHA256: strings.Repeat("ab", 32),
		Reason: store.ReasonTooLarge, Detail: "invalid message: message is 70000 bytes, the limit is 65536",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", db)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"quarantine", "retry", itoa(id)}, nil, &stdout, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "70000-byte message (too_large)") || !strings.Contains(stderr.String(), "cannot be sent again") {
		t.Errorf("exit %d, stderr %q; want exit %d refusing the truncated message", code, stderr.String(), exitError)
	}
	var retried int
	if err := pool.QueryRow(ctx, `SELECT retry_count FROM quarantine WHERE id = $1`, id).Scan(&retried); err != nil || retried != 0 {
		t.Errorf("retry_count = %d (%v), want 0", retried, err)
	}
}
