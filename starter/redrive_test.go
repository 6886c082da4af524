package main

import (
	"context"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/store"
)

// inboxed records message id of consumer as intake does, so redrive finds
// it.
func (f *opsFixture) inboxed(t *testing.T, consumer, id string) {
	t.Helper()
	if _, err := f.db.InsertInbox(context.Background(), store.InboxEntry{
		Consumer: consumer, MessageID: id, Payload: []byte(`{"id":"` + id + `"}`), PayloadHash: "h-" + id, Source: "test",
	}); err != nil {
		t.Fatal(err)
	}
}

// paid charges order for message id and returns nothing: the payment
// succeeds at the simulator and in the ledger.
func (f *opsFixture) paid(t *testing.T, id string, order int64) {
	t.Helper()
	if _, err := f.charge(t, id, order, "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveRefusesWhileAnyEffectMayExist: redrive looks at every effect
// of the message, not only its payment. A claimed refund (Stripe may have
// refunded under a key it no longer remembers), an order receipt or a refund
// receipt claimed or in flight (SendGrid may have sent it) each refuse it,
// with exit 6, naming the effect and before Temporal is asked anything.
func TestRedriveRefusesWhileAnyEffectMayExist(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()

	// A claimed refund.
	f.paid(t, "evt_o1", 501)
	if _, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf1", OrderID: 501, Amount: 100, Reason: "requested_by_customer", Key: "refund:evt_rf1", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	f.inboxed(t, "order-refund", "evt_rf1")

	// An order receipt in flight (at-most-once).
	f.paid(t, "evt_o2", 502)
	if _, _, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: "order-placed", MessageID: "evt_o2", OrderID: 502, Key: "email:evt_o2", RequestHash: "h", Policy: store.AtMostOnce}); err != nil {
		t.Fatal(err)
	}
	f.inboxed(t, "order-placed", "evt_o2")

	// A refund receipt claimed (at-least-once) after the refund succeeded.
	f.paid(t, "evt_o3", 503)
	rc, err := f.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rf3", OrderID: 503, Amount: 100, Reason: "requested_by_customer", Key: "refund:evt_rf3", RequestHash: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: "evt_rf3", OrderID: 503, Key: "refund:evt_rf3", Claim: rc.Claim, RefundID: "re_3", Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.db.ClaimEmail(ctx, store.EmailClaim{Consumer: "order-refund", MessageID: "evt_rf3", Key: "email:evt_rf3", RequestHash: "h", Policy: store.AtLeastOnce}); err != nil {
		t.Fatal(err)
	}
	f.inboxed(t, "order-refund", "evt_rf3")

	for _, tc := range []struct {
		consumer, id, names string
	}{
		{"order-refund", "evt_rf1", "refund"},
		{"order-placed", "evt_o2", "receipt"},
		{"order-refund", "evt_rf3", "refund receipt"},
	} {
		code, out, stderr := runStarter(t, "redrive", "-consumer", tc.consumer, tc.id)
		if code != exitRefused || !strings.Contains(stderr, tc.names) || !strings.Contains(out, `"refused"`) {
			t.Errorf("redrive %s: exit %d, stdout %q, stderr %q; want %d naming the %s", tc.id, code, out, strings.TrimSpace(stderr), exitRefused, tc.names)
		}
	}
}
