package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/effectively/effectively/internal/adapter/store"
)

// anomaly makes the webhook's contradiction for message id: a succeeded
// payment, then Stripe's payment_failed for it, kept as anomaly eventID.
func (f *opsFixture) anomaly(t *testing.T, id string, order int64, eventID string) {
	t.Helper()
	ctx := context.Background()
	f.paid(t, id, order)
	p, err := f.db.PaymentOf(ctx, "order-placed", id)
	if err != nil {
		t.Fatal(err)
	}
	ev := store.PaymentEvent{EventID: eventID, EventType: "payment_intent.payment_failed", PaymentIntentID: p.PaymentIntentID,
		Key: p.Key, Target: store.PaymentFailed, Status: "requires_payment_method"}
	if _, err := f.db.RecordProviderEvent(ctx, store.ProviderEvent{Consumer: "stripe-events", EventID: eventID, Payload: []byte(`{}`), PayloadHash: "x", Source: "test"},
		func(ctx context.Context, tx pgx.Tx) error {
			res, err := store.ApplyPaymentEvent(ctx, tx, ev)
			if err == nil && !res.Anomaly {
				t.Errorf("event %s was not an anomaly: %+v", eventID, res)
			}
			return err
		}); err != nil {
		t.Fatal(err)
	}
}

// TestAnomaliesListAndResolve: an operator lists the open anomalies, marks
// one resolved with a reason that is kept, and cannot resolve it twice or
// without a reason; resolved ones are listed only with -all.
func TestAnomaliesListAndResolve(t *testing.T) {
	f := newOpsFixture(t)
	f.anomaly(t, "evt_an1", 601, "evt_contra1")
	f.anomaly(t, "evt_an2", 602, "evt_contra2")

	code, out, stderr := runStarter(t, "anomalies", "list")
	if code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"event_id":"evt_contra1"`) || !strings.Contains(out, `"message_id":"evt_an2"`) {
		t.Fatalf("list: exit %d, %s %s", code, out, stderr)
	}
	if code, _, _ := runStarter(t, "anomalies", "resolve", "evt_contra1"); code != exitUsage {
		t.Fatalf("resolve without a reason: exit %d, want %d", code, exitUsage)
	}
	code, out, stderr = runStarter(t, "anomalies", "resolve", "evt_contra1", "--reason", "refunded by hand in the dashboard (ticket 17)")
	var a store.PaymentAnomaly
	if err := json.Unmarshal([]byte(out), &a); err != nil || code != exitOK || a.Resolution != "refunded by hand in the dashboard (ticket 17)" || a.ResolvedAt == nil {
		t.Fatalf("resolve: exit %d, %s %s", code, out, stderr)
	}
	if code, _, stderr := runStarter(t, "anomalies", "resolve", "evt_contra1", "--reason", "again"); code != exitRefused || !strings.Contains(stderr, "already resolved") {
		t.Fatalf("resolve twice: exit %d, %s; want %d", code, stderr, exitRefused)
	}
	if code, _, _ := runStarter(t, "anomalies", "resolve", "evt_nope", "--reason", "x"); code != exitNotFound {
		t.Fatalf("resolve of no anomaly: exit %d, want %d", code, exitNotFound)
	}
	if code, out, _ := runStarter(t, "anomalies", "list"); code != exitOK || strings.Contains(out, "evt_contra1") || !strings.Contains(out, "evt_contra2") {
		t.Fatalf("list after resolve: exit %d, %s", code, out)
	}
	if code, out, _ := runStarter(t, "anomalies", "list", "-all"); code != exitOK || !strings.Contains(out, "ticket 17") || strings.Count(out, "\n") != 2 {
		t.Fatalf("list -all: exit %d, %s", code, out)
	}
}
