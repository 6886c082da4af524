package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// startEnv is a configuration the worker accepts, on database db, whose
// start fails (exit 1) at the Temporal dial, after the key namespace guard.
func startEnv(t *testing.T, db, namespace string) {
	t.Setenv("STRIPE_API_KEY", "sk_test_x")
	t.Setenv("SENDGRID_API_KEY", "SG.x")
	t.Setenv("DATABASE_URL", db)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("NATS_URL", "off")
	t.Setenv("EFFECTIVELY_HEALTH_ADDR", "off")
	t.Setenv("EFFECTIVELY_WEBHOOK_ADDR", "off")
	t.Setenv("EFFECTIVELY_KEY_NAMESPACE", namespace)
}

// runCapturing runs the worker and returns its exit code and its log.
func runCapturing(t *testing.T, args []string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stderr
	os.Stderr = f
	code := run(args)
	os.Stderr = saved
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestKeyNamespaceChangeExits2: a worker configured with another key
// namespace than the one recorded, while a payment made under the recorded
// one is open, refuses to start with exit 2 and a message naming the
// variable, both values and the count; it records nothing. Once nothing is
// open the same start gets past the guard (to the Temporal dial here) and
// records the new value. `worker migrate` does not run the guard.
func TestKeyNamespaceChangeExits2(t *testing.T) {
	ctx := context.Background()
	db := storetest.NewDatabase(t)
	pool, err := store.Open(ctx, db, store.PoolConfig{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := store.GuardKeyNamespace(ctx, pool, "blue"); err != nil {
		t.Fatal(err)
	}
	s := store.New(pool)
	c := store.PaymentClaim{Consumer: "order-placed", MessageID: "evt_open", OrderID: 7, Amount: 1999, Currency: "usd",
		Key: "payment:evt_open", RequestHash: "h"}
	res, err := s.ClaimPayment(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	startEnv(t, db, "green")
	code, log := runCapturing(t, nil)
	if code != 2 {
		t.Fatalf("worker with a changed namespace and an open payment: exit %d, want 2; log:\n%s", code, log)
	}
	for _, want := range []string{"EFFECTIVELY_KEY_NAMESPACE", `\"blue\"`, `\"green\"`, "1 payment", "evt_open"} {
		if !strings.Contains(log, want) {
			t.Errorf("refusal does not say %s:\n%s", want, log)
		}
	}
	if v, _, err := store.RecordedKeyNamespace(ctx, pool); err != nil || v != "blue" {
		t.Fatalf("after the refusal the database records %q, %v; want blue", v, err)
	}
	// `worker migrate` only migrates: the guard is the workers' start.
	if code, log := runCapturing(t, []string{"migrate"}); code != 0 {
		t.Fatalf("worker migrate with a changed namespace: exit %d, want 0; log:\n%s", code, log)
	}

	if _, err := s.RecordPaymentFailed(ctx, store.PaymentFailure{Consumer: c.Consumer, MessageID: c.MessageID, OrderID: c.OrderID,
		Key: c.Key, Claim: res.Claim, Code: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	code, log = runCapturing(t, nil)
	if code != 1 || !strings.Contains(log, "key namespace changed") {
		t.Fatalf("worker with a changed namespace and nothing open: exit %d, want 1 (no Temporal) after the change; log:\n%s", code, log)
	}
	if v, _, err := store.RecordedKeyNamespace(ctx, pool); err != nil || v != "green" {
		t.Fatalf("after the drained start the database records %q, %v; want green", v, err)
	}
}
