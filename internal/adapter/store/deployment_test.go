package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

func recordedNamespace(t *testing.T, pool *pgxpool.Pool) (string, bool) {
	t.Helper()
	v, ok, err := store.RecordedKeyNamespace(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// TestKeyNamespaceFirstStartRecords: a new database records the namespace
// of the first worker; the same value then passes without a change.
func TestKeyNamespaceFirstStartRecords(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	if _, ok := recordedNamespace(t, pool); ok {
		t.Fatal("a new database already records a key namespace")
	}
	res, err := store.GuardKeyNamespace(ctx, pool, "eu")
	if err != nil || res.HadRecord || res.Recorded != "" || !res.Changed {
		t.Fatalf("first start = %+v, %v; want no record before, recorded eu", res, err)
	}
	if v, ok := recordedNamespace(t, pool); !ok || v != "eu" {
		t.Fatalf("recorded = %q, %v; want eu", v, ok)
	}
	// An open payment does not matter while the value stays the same.
	if _, err := store.New(pool).ClaimPayment(ctx, claim("evt_same", 1)); err != nil {
		t.Fatal(err)
	}
	res, err = store.GuardKeyNamespace(ctx, pool, "eu")
	if err != nil || !res.HadRecord || res.Recorded != "eu" || res.Changed {
		t.Fatalf("same value = %+v, %v; want passed unchanged", res, err)
	}
}

// TestKeyNamespaceDefaultOnExistingDeployment: a deployment that ran before
// the guard (no record, effects open, unscoped keys) starts with the default
// and gets "" recorded, without refusal; setting a namespace in the same
// upgrade is a change from "" and refused while effects are open.
func TestKeyNamespaceDefaultOnExistingDeployment(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	if _, err := store.New(pool).ClaimPayment(ctx, claim("evt_old", 1)); err != nil {
		t.Fatal(err)
	}

	_, err := store.GuardKeyNamespace(ctx, pool, "eu")
	var nsErr *store.KeyNamespaceError
	if !errors.As(err, &nsErr) || nsErr.Recorded != "" || nsErr.Configured != "eu" || nsErr.Open.Payments != 1 {
		t.Fatalf("namespace set on an unrecorded deployment with an open payment: %v; want refused from \"\"", err)
	}
	if _, ok := recordedNamespace(t, pool); ok {
		t.Fatal("a refused start left a record")
	}

	res, err := store.GuardKeyNamespace(ctx, pool, "")
	if err != nil || res.HadRecord || res.Changed {
		t.Fatalf("default namespace = %+v, %v; want recorded without refusal", res, err)
	}
	if v, ok := recordedNamespace(t, pool); !ok || v != "" {
		t.Fatalf("recorded = %q, %v; want \"\" recorded", v, ok)
	}
}

// TestKeyNamespaceChangeRefusedWhileOpen: a different namespace is refused
// while any payment, refund or receipt is open, each kind on its own, with
// an error naming both values and the counts; once all are final it is
// recorded.
func TestKeyNamespaceChangeRefusedWhileOpen(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	if _, err := store.GuardKeyNamespace(ctx, pool, "old"); err != nil {
		t.Fatal(err)
	}

	// A claimed payment (its PaymentIntent may exist, not yet recorded).
	if _, err := s.ClaimPayment(ctx, claim("evt_pay", 1)); err != nil {
		t.Fatal(err)
	}
	// A paid order with a claimed refund and a receipt being sent.
	paid, err := s.ClaimPayment(ctx, claim("evt_paid", 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_paid", OrderID: 2,
		Key: "payment:evt_paid", Claim: paid.Claim, PaymentIntentID: "pi_paid", Amount: 1999, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	refund, err := s.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_ref", OrderID: 2, Amount: 500,
		Reason: "requested_by_customer", Key: "refund:evt_ref", RequestHash: "r"})
	if err != nil || refund.Decision != store.RefundOwned {
		t.Fatalf("claim refund = %+v, %v", refund, err)
	}
	_, mail, err := s.ClaimEmail(ctx, store.EmailClaim{Consumer: "order-placed", MessageID: "evt_paid", OrderID: 2,
		Key: "email:evt_paid", RequestHash: "m", Policy: store.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}

	refused := func(payments, refunds, receipts int64) {
		t.Helper()
		_, err := store.GuardKeyNamespace(ctx, pool, "new")
		var nsErr *store.KeyNamespaceError
		if !errors.As(err, &nsErr) || !errors.Is(err, store.ErrKeyNamespaceInUse) {
			t.Fatalf("change with open effects: %v; want *KeyNamespaceError", err)
		}
		if nsErr.Recorded != "old" || nsErr.Configured != "new" ||
			nsErr.Open.Payments != payments || nsErr.Open.Refunds != refunds || nsErr.Open.Receipts != receipts {
			t.Fatalf("refusal = %+v; want old → new with %d payments, %d refunds, %d receipts open", nsErr, payments, refunds, receipts)
		}
		for _, want := range []string{`"old"`, `"new"`, plural(payments, "payment"), plural(refunds, "refund"), plural(receipts, "receipt"), "docs/runbook.md"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refusal %q does not say %q", err, want)
			}
		}
		if v, _ := recordedNamespace(t, pool); v != "old" {
			t.Fatalf("refused change recorded %q", v)
		}
	}
	refused(1, 1, 1)
	if !strings.Contains(fmtErr(ctx, pool), "evt_pay") {
		t.Errorf("refusal does not name the open payment's message")
	}

	if _, err := s.RecordPaymentFailed(ctx, store.PaymentFailure{Consumer: "order-placed", MessageID: "evt_pay", OrderID: 1,
		Key: "payment:evt_pay", Claim: 1, Code: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	refused(0, 1, 1)
	if _, err := s.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: "evt_ref", OrderID: 2,
		Key: "refund:evt_ref", Claim: refund.Claim, RefundID: "re_1", Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	refused(0, 0, 1)
	if _, err := s.RecordEmailSent(ctx, "email:evt_paid", mail.Claim, 2, "sg_1"); err != nil {
		t.Fatal(err)
	}

	res, err := store.GuardKeyNamespace(ctx, pool, "new")
	if err != nil || !res.HadRecord || res.Recorded != "old" || !res.Changed {
		t.Fatalf("change once drained = %+v, %v; want old → new", res, err)
	}
	if v, _ := recordedNamespace(t, pool); v != "new" {
		t.Fatalf("recorded = %q, want new", v)
	}
}

// TestKeyNamespaceConcurrentStarts: workers starting at once with different
// values, nothing open, agree on one order: each takes over from the value
// the one before it recorded, never from a value already replaced, and the
// first start of a new database does not fail on the racing insert.
func TestKeyNamespaceConcurrentStarts(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	for round := range 10 {
		if _, err := pool.Exec(ctx, `DELETE FROM deployment`); err != nil {
			t.Fatal(err)
		}
		values := []string{"a", "b", "c", "d"}
		results := make([]store.KeyNamespaceCheck, len(values))
		errs := make([]error, len(values))
		var wg sync.WaitGroup
		for i, v := range values {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = store.GuardKeyNamespace(ctx, pool, v)
			}()
		}
		wg.Wait()
		// Follow the chain from "" (no record): every value is taken over
		// exactly once, and the last one is what the database holds.
		next := map[string]string{}
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("round %d: start with %q: %v", round, values[i], errs[i])
			}
			if _, dup := next[r.Recorded]; dup {
				t.Fatalf("round %d: two starts took over from %q: %+v", round, r.Recorded, results)
			}
			next[r.Recorded] = values[i]
		}
		cur := ""
		for range values {
			n, ok := next[cur]
			if !ok {
				t.Fatalf("round %d: broken chain at %q: %+v", round, cur, results)
			}
			cur = n
		}
		if v, _ := recordedNamespace(t, pool); v != cur {
			t.Fatalf("round %d: recorded %q, the last start recorded %q", round, v, cur)
		}
	}
}

// fmtErr is the refusal's text for a change to "new".
func fmtErr(ctx context.Context, pool *pgxpool.Pool) string {
	_, err := store.GuardKeyNamespace(ctx, pool, "new")
	if err == nil {
		return ""
	}
	return err.Error()
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}
