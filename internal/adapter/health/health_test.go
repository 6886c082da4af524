package health_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

func get(t *testing.T, h http.Handler, path string) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil))
	var rep health.Report
	if path == "/readyz" {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body)
		}
	}
	return rec.Code, rep
}

func serve(checks ...health.Check) http.Handler {
	mux := http.NewServeMux()
	health.New(0, checks...).Register(mux)
	return mux
}

// TestReadyzNamesEachFailingCheck runs every real check against a working
// dependency and a broken one: /readyz answers 503 naming exactly the
// broken ones, /livez and /healthz stay 200.
func TestReadyzNamesEachFailingCheck(t *testing.T) {
	ctx := context.Background()
	good := store.New(storetest.NewPool(t))

	// Postgres that does not answer.
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)

	// Postgres one migration behind this binary.
	behindPool := storetest.NewPool(t)
	if _, err := behindPool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, store.SchemaVersion()); err != nil {
		t.Fatal(err)
	}
	behind := store.New(behindPool)

	// Temporal that does not answer.
	tcDown, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tcDown.Close)

	// NATS connected, then closed.
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatalf("NATS is required: %v", err)
	}
	closed, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	t.Cleanup(nc.Close)

	cases := []struct {
		name   string
		checks []health.Check
		failed []string
		detail string
	}{
		{"all good", []health.Check{health.Postgres(good), health.NATS(nc)}, nil, ""},
		{"postgres down", []health.Check{health.Postgres(store.New(down)), health.NATS(nc)}, []string{"postgres"}, "127.0.0.1"},
		{"postgres not migrated", []health.Check{health.Postgres(behind)}, []string{"postgres"}, "this binary needs"},
		{"temporal down", []health.Check{health.Postgres(good), health.Temporal(tcDown)}, []string{"temporal"}, "temporal health check"},
		{"nats closed", []health.Check{health.NATS(closed), health.Postgres(good)}, []string{"nats"}, "CLOSED"},
		{"two down", []health.Check{health.NATS(closed), health.Postgres(store.New(down))}, []string{"nats", "postgres"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := serve(tc.checks...)
			for _, p := range []string{"/livez", "/healthz"} {
				if code, _ := get(t, h, p); code != http.StatusOK {
					t.Errorf("%s = %d, want 200", p, code)
				}
			}
			code, rep := get(t, h, "/readyz")
			want := http.StatusOK
			if len(tc.failed) > 0 {
				want = http.StatusServiceUnavailable
			}
			if code != want || strings.Join(rep.Failed, ",") != strings.Join(tc.failed, ",") {
				t.Fatalf("/readyz = %d %+v, want %d failing %v", code, rep, want, tc.failed)
			}
			for _, f := range tc.failed {
				if tc.detail != "" && !strings.Contains(rep.Checks[f], tc.detail) {
					t.Errorf("check %s says %q, want it to mention %q", f, rep.Checks[f], tc.detail)
				}
			}
			for _, c := range tc.checks {
				if !contains(tc.failed, c.Name) && rep.Checks[c.Name] != "ok" {
					t.Errorf("check %s = %q, want ok", c.Name, rep.Checks[c.Name])
				}
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
