package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/stripesim"
)

// refundHooks is a Stripe webhook handler on e's database that records the
// signals it sends and counts refund updates.
type refundHooks struct {
	h       *webhook.Handler
	metrics *webhook.Metrics
	mu      sync.Mutex
	signals []string
}

func (r *refundHooks) SignalWorkflow(_ context.Context, workflowID, _, name string, _ any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals = append(r.signals, name+" "+workflowID)
	return nil
}

func newRefundHooks(t *testing.T, e *confEnv) *refundHooks {
	t.Helper()
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &refundHooks{metrics: m}
	if r.h, err = webhook.New(e.db, r, m, webhook.Config{StripeSecrets: []string{confStripeHook}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// deliver posts a signed Stripe event carrying obj under the event ID id
// and returns the status.
func (r *refundHooks) deliver(t *testing.T, id, typ string, obj any) int {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": stripe.APIVersion, "created": time.Now().Unix(),
		"type": typ, "data": map[string]any{"object": obj},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, webhook.StripePath, bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", stripesim.SignatureHeader(body, confStripeHook, time.Now()))
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req)
	return rec.Code
}

// refundRow is the refunds row of the refund message id.
func refundRow(t *testing.T, e *confEnv, id string) store.Refund {
	t.Helper()
	r, err := e.db.RefundOf(context.Background(), "order-refund", id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func refundedOf(t *testing.T, e *confEnv, order int64) int64 {
	t.Helper()
	n, _, err := e.db.RefundedAmount(context.Background(), order)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func refundOutcome(t *testing.T, e *confEnv, id string) string {
	t.Helper()
	var o string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT outcome FROM processed_messages WHERE consumer = 'order-refund' AND message_id = $1`, id).Scan(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestPendingRefundSettlesBeforeItsReceipt: a refund Stripe answers pending
// (pm_card_pendingRefund) is recorded pending, its amount reserved, with no
// receipt claimed or sent, even by the local attempt that keeps time for
// one. CheckRefund reads Stripe while it stays pending and records it
// refunded once Stripe moved it; the receipt is sent only then.
func TestPendingRefundSettlesBeforeItsReceipt(t *testing.T) {
	e := newConfEnv(t)
	e.payWith("evt_pp1", 61, "pm_card_pendingRefund")
	in := confRefundInput(confMsg{ID: "evt_rp1", Order: 61, Amount: 500})
	in.ReceiptBudget = 10 * time.Second
	lr, err := confExecute(context.Background(), e, e.acts.RefundOrderLocally, in)
	if err != nil {
		t.Fatal(err)
	}
	r, attempt := lr.Outcome()
	if attempt != nil || r.Outcome != activities.RefundPending || r.RefundID == "" || r.Receipt != nil || r.Status != "pending" {
		t.Fatalf("local refund = %+v, %v; want pending with no receipt", r, attempt)
	}
	row := refundRow(t, e, "evt_rp1")
	if row.State != store.RefundPending || row.RefundID != r.RefundID || refundedOf(t, e, 61) != 500 || refundOutcome(t, e, "evt_rp1") != "refund_pending" {
		t.Fatalf("pending refund recorded as %+v, refunded %d, outcome %q", row, refundedOf(t, e, 61), refundOutcome(t, e, "evt_rp1"))
	}
	if n := e.rows(`SELECT count(*) FROM effects WHERE kind = 'email' AND message_id = $1`, "evt_rp1"); n != 0 || len(confMails(e, "evt_rp1", "Your refund")) != 0 {
		t.Fatalf("a receipt of the pending refund was claimed (%d rows) or sent", n)
	}
	// A copy of the message: the refund is recorded; Stripe is not asked again.
	again, err := confExecute(context.Background(), e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rp1", Order: 61, Amount: 500}))
	if err != nil || again.Outcome != activities.RefundPending || again.RefundID != r.RefundID || !again.Recorded {
		t.Fatalf("copy = %+v, %v", again, err)
	}

	// A receipt asked for while the refund is pending (a workflow of an
	// earlier release would) is refused, and nothing is sent.
	rin := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_rp1", OrderID: 61, Amount: 500, Currency: "usd", RefundID: r.RefundID}
	if m, err := confExecute(context.Background(), e, e.acts.SendRefundReceipt, rin); !isType(err, activities.ErrTypeRefundNotSucceeded) || len(confMails(e, "evt_rp1", "Your refund")) != 0 {
		t.Fatalf("receipt of a pending refund = %+v, %v; want %s and no mail", m, err, activities.ErrTypeRefundNotSucceeded)
	}

	check := activities.CheckRefundInput{Consumer: "order-refund", MessageID: "evt_rp1", OrderID: 61}
	before := e.stripe.Stats().Requests
	c1, err := confExecute(context.Background(), e, e.acts.CheckRefund, check)
	if err != nil || c1.Outcome != activities.RefundPending {
		t.Fatalf("check while pending = %+v, %v", c1, err)
	}
	if n := e.stripe.Stats().Requests - before; n != 1 {
		t.Errorf("a check of a pending refund made %d requests, want 1 (the retrieve)", n)
	}
	if err := e.stripe.SettleRefund(r.RefundID); err != nil {
		t.Fatal(err)
	}
	c2, err := confExecute(context.Background(), e, e.acts.CheckRefund, check)
	if err != nil || c2.Outcome != activities.RefundRefunded || c2.RefundID != r.RefundID {
		t.Fatalf("check once settled = %+v, %v", c2, err)
	}
	if row := refundRow(t, e, "evt_rp1"); row.State != store.RefundSucceeded || refundedOf(t, e, 61) != 500 || refundOutcome(t, e, "evt_rp1") != "refunded" {
		t.Fatalf("settled refund recorded as %+v, outcome %q", row, refundOutcome(t, e, "evt_rp1"))
	}
	for _, ev := range []string{"refund.pending:evt_rp1", "refund.refunded:evt_rp1"} {
		if n := e.rows(`SELECT count(*) FROM outbox WHERE event_id = $1`, ev); n != 1 {
			t.Errorf("outbox %s: %d rows, want 1", ev, n)
		}
	}
	// Settled in Postgres: a later check asks Stripe nothing.
	before = e.stripe.Stats().Requests
	if c3, err := confExecute(context.Background(), e, e.acts.CheckRefund, check); err != nil || c3.Outcome != activities.RefundRefunded {
		t.Fatalf("check again = %+v, %v", c3, err)
	}
	if n := e.stripe.Stats().Requests - before; n != 0 {
		t.Errorf("a check of a settled refund made %d requests, want 0", n)
	}
	m, err := confExecute(context.Background(), e, e.acts.SendRefundReceipt, rin)
	if err != nil || m.Outcome != activities.ReceiptSent || len(confMails(e, "evt_rp1", "Your refund")) != 1 {
		t.Fatalf("receipt after the refund succeeded = %+v, %v", m, err)
	}
}

// TestPendingRefundThatFailsFreesItsAmount: a pending refund Stripe then
// reports failed, by its webhook, gives its amount back and ends
// refund_failed; the workflow waiting for it is woken.
func TestPendingRefundThatFailsFreesItsAmount(t *testing.T) {
	e := newConfEnv(t)
	hooks := newRefundHooks(t, e)
	e.payWith("evt_pp2", 62, "pm_card_pendingRefund")
	r, err := confExecute(context.Background(), e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rp2", Order: 62, Amount: 700}))
	if err != nil || r.Outcome != activities.RefundPending {
		t.Fatalf("refund = %+v, %v", r, err)
	}
	obj := e.stripeObject("/v1/refunds/" + r.RefundID)
	obj["status"], obj["failure_reason"] = "failed", "expired_or_canceled_card"
	if code := hooks.deliver(t, "evt_fail_1", "charge.refund.updated", obj); code != http.StatusOK {
		t.Fatalf("webhook answered %d", code)
	}
	row := refundRow(t, e, "evt_rp2")
	if row.State != store.RefundFailed || row.FailureCode != "refund_expired_or_canceled_card" || refundedOf(t, e, 62) != 0 || refundOutcome(t, e, "evt_rp2") != "refund_failed" {
		t.Fatalf("failed refund recorded as %+v, refunded %d, outcome %q", row, refundedOf(t, e, 62), refundOutcome(t, e, "evt_rp2"))
	}
	if len(hooks.signals) != 1 || hooks.signals[0] != "refund-settled order-refund/evt_rp2" {
		t.Errorf("signals = %v; want the refund's workflow woken once", hooks.signals)
	}
	c, err := confExecute(context.Background(), e, e.acts.CheckRefund, activities.CheckRefundInput{Consumer: "order-refund", MessageID: "evt_rp2", OrderID: 62})
	if err != nil || c.Outcome != activities.RefundFailed || c.FailureCode != "refund_expired_or_canceled_card" {
		t.Fatalf("check = %+v, %v", c, err)
	}
}

// TestRefundFailingAfterItSucceeded: Stripe reports a refund failed after it
// succeeded (pm_card_refundFail: the card cannot take the money back). The
// ledger follows Stripe: the refund fails, its amount is free again, the
// message's outcome is refund_failed, refund.failed goes out, and the
// counter an operator alerts on moves. A copy of the event, and an older
// event arriving after it, change nothing.
func TestRefundFailingAfterItSucceeded(t *testing.T) {
	e := newConfEnv(t)
	hooks := newRefundHooks(t, e)
	e.payWith("evt_pf", 63, "pm_card_refundFail")
	r, err := confExecute(context.Background(), e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rf", Order: 63, Amount: 1999}))
	if err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("refund = %+v, %v", r, err)
	}
	succeeded := e.stripeObject("/v1/refunds/" + r.RefundID)
	if err := e.stripe.SettleRefund(r.RefundID); err != nil {
		t.Fatal(err)
	}
	failed := e.stripeObject("/v1/refunds/" + r.RefundID)
	if failed["status"] != "failed" {
		t.Fatalf("the simulator's refund is %v", failed["status"])
	}
	for i := range 2 { // the event, and a copy of it
		if code := hooks.deliver(t, "evt_reversal", "charge.refund.updated", failed); code != http.StatusOK {
			t.Fatalf("delivery %d answered %d", i, code)
		}
	}
	// An older event (the refund still succeeded) arriving late.
	if code := hooks.deliver(t, "evt_older", "charge.refund.updated", succeeded); code != http.StatusOK {
		t.Fatalf("older event answered %d", code)
	}
	row := refundRow(t, e, "evt_rf")
	if row.State != store.RefundFailed || refundedOf(t, e, 63) != 0 || refundOutcome(t, e, "evt_rf") != "refund_failed" {
		t.Fatalf("reversed refund recorded as %+v, refunded %d, outcome %q", row, refundedOf(t, e, 63), refundOutcome(t, e, "evt_rf"))
	}
	if n := e.rows(`SELECT count(*) FROM outbox WHERE event_id = $1`, "refund.failed:evt_rf"); n != 1 {
		t.Errorf("refund.failed events: %d, want 1", n)
	}
	if got := testutil.ToFloat64(hooks.metrics.RefundUpdates().WithLabelValues("succeeded", "failed")); got != 1 {
		t.Errorf("effectively_refund_updates_total{from=succeeded,to=failed} = %v, want 1", got)
	}
	if len(hooks.signals) != 0 {
		t.Errorf("signals = %v; no workflow waits for a refund that had succeeded", hooks.signals)
	}
	// The amount is free again: the order can be refunded, once more.
	again, err := confExecute(context.Background(), e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rf2", Order: 63, Amount: 1999}))
	if err != nil || again.Outcome != activities.RefundRefunded {
		t.Fatalf("a new refund after the reversal = %+v, %v", again, err)
	}
}

// TestRefundUpdateBeforeItsRecord: an update of a refund whose creation is
// not recorded yet (its row still claimed) is refused with a 503, so
// Stripe sends it again, and nothing of it is kept; an update of a refund
// no row names is acknowledged and changes nothing.
func TestRefundUpdateBeforeItsRecord(t *testing.T) {
	e := newConfEnv(t)
	hooks := newRefundHooks(t, e)
	e.pay("evt_pc", 64)
	if _, err := e.db.ClaimRefund(context.Background(), store.RefundClaim{
		Consumer: "order-refund", MessageID: "evt_rc", OrderID: 64, Amount: 500, Reason: "requested_by_customer",
		Key: "refund:evt_rc", RequestHash: activities.RequestHash(confRefundInput(confMsg{ID: "evt_rc", Order: 64, Amount: 500})),
	}); err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"id": "re_unrecorded", "object": "refund", "status": "failed", "amount": 500, "currency": "usd",
		"metadata": map[string]string{"message_id": "evt_rc"}}
	if code := hooks.deliver(t, "evt_early", "charge.refund.updated", obj); code != http.StatusServiceUnavailable {
		t.Fatalf("an update before the record answered %d, want 503", code)
	}
	if row := refundRow(t, e, "evt_rc"); row.State != store.RefundClaimed || refundedOf(t, e, 64) != 500 {
		t.Fatalf("the early update moved the claimed refund: %+v", row)
	}
	if n := e.rows(`SELECT count(*) FROM inbox WHERE message_id = $1`, "evt_early"); n != 0 {
		t.Errorf("the refused event was kept (%d rows): its retry would be taken as a copy", n)
	}
	stranger := map[string]any{"id": "re_stranger", "object": "refund", "status": "failed", "amount": 100, "currency": "usd"}
	if code := hooks.deliver(t, "evt_stranger", "charge.refund.updated", stranger); code != http.StatusOK {
		t.Fatalf("an update of a refund no row names answered %d", code)
	}
	if got := fmt.Sprint(refundedOf(t, e, 64)); got != "500" {
		t.Errorf("refunded = %s", got)
	}
}

// TestPendingRefundKeepsItsAddress: the paying message's inbox row, the
// only copy of the receipt's address, is not pruned while a refund of the
// order is pending, so a refund that succeeds after RETENTION still gets
// its receipt; once it settled, the row is pruned.
func TestPendingRefundKeepsItsAddress(t *testing.T) {
	ctx := context.Background()
	e := newConfEnv(t)
	e.payWith("evt_rpp", 72, "pm_card_pendingRefund")
	r, err := confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rpr", Order: 72, Amount: 500}))
	if err != nil || r.Outcome != activities.RefundPending {
		t.Fatalf("refund = %+v, %v", r, err)
	}
	if _, err := e.db.Pool().Exec(ctx, `UPDATE inbox SET state = 'dispatched', received_at = now() - interval '31 days', dispatched_at = now() - interval '31 days' WHERE message_id = 'evt_rpp'`); err != nil {
		t.Fatal(err)
	}
	if n, err := e.db.Prune(ctx, store.PruneInbox, 30*24*time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("prune while the refund is pending: %d, %v; want 0", n, err)
	}
	if err := e.stripe.SettleRefund(r.RefundID); err != nil {
		t.Fatal(err)
	}
	if c, err := confExecute(ctx, e, e.acts.CheckRefund, activities.CheckRefundInput{Consumer: "order-refund", MessageID: "evt_rpr", OrderID: 72}); err != nil || c.Outcome != activities.RefundRefunded {
		t.Fatalf("check = %+v, %v", c, err)
	}
	m, err := confExecute(ctx, e, e.acts.SendRefundReceipt, activities.RefundReceiptInput{
		Consumer: "order-refund", MessageID: "evt_rpr", OrderID: 72, Amount: 500, Currency: "usd", RefundID: r.RefundID,
	})
	if err != nil || m.Outcome != activities.ReceiptSent {
		t.Fatalf("receipt of the refund that succeeded past the retention: %+v, %v", m, err)
	}
	if n, err := e.db.Prune(ctx, store.PruneInbox, 30*24*time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("prune once the refund settled: %d, %v; want 1", n, err)
	}
}

// TestReplayedRefundIsReadAgain: an attempt whose first call's answer was
// lost gets Stripe's replay of it (succeeded) after the refund failed at
// Stripe (pm_card_refundFail). The attempt reads the Refund again and
// records it failed, its amount free, with no receipt; recording the stale
// replay would have sent a receipt for money that never came.
func TestReplayedRefundIsReadAgain(t *testing.T) {
	ctx := context.Background()
	e := newConfEnv(t)
	e.payWith("evt_pst", 73, "pm_card_refundFail")
	p, err := e.db.PaymentOf(ctx, "order-placed", "evt_pst")
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt's call, its answer lost.
	lost, err := e.acts.Payments.Refund(ctx, payment.RefundRequest{IdempotencyKey: "refund:evt_rst", MessageID: "evt_rst", OrderID: 73,
		PaymentIntentID: p.PaymentIntentID, Amount: 500, Reason: "requested_by_customer"})
	if err != nil || lost.Status != "succeeded" {
		t.Fatalf("first call = %+v, %v", lost, err)
	}
	if err := e.stripe.SettleRefund(lost.ID); err != nil {
		t.Fatal(err)
	}
	in := confRefundInput(confMsg{ID: "evt_rst", Order: 73, Amount: 500})
	in.ReceiptBudget = 10 * time.Second
	lr, err := confExecute(ctx, e, e.acts.RefundOrderLocally, in)
	if err != nil {
		t.Fatal(err)
	}
	r, attempt := lr.Outcome()
	if attempt != nil || r.Outcome != activities.RefundFailed || r.Receipt != nil || !strings.Contains(r.FailureCode, "failed") {
		t.Fatalf("retry = %+v, %v; want refund_failed from the Refund read again, no receipt", r, attempt)
	}
	if row := refundRow(t, e, "evt_rst"); row.State != store.RefundFailed || refundedOf(t, e, 73) != 0 || len(confMails(e, "evt_rst", "Your refund")) != 0 {
		t.Fatalf("row %+v, refunded %d", row, refundedOf(t, e, 73))
	}
	if n := e.stripe.Stats().RefundsByMessage["evt_rst"]; n != 1 {
		t.Errorf("stripe refunds of the message = %d, want 1", n)
	}
}

// TestRefundUpdateOfARefundRecordedNotCreated: Stripe reports a refund under
// a message whose refund the ledger recorded as never created (starter
// resolve found none, its amount given back). Nothing is changed, the event
// is acknowledged, and the operator's counter moves: the order may be
// refunded twice.
func TestRefundUpdateOfARefundRecordedNotCreated(t *testing.T) {
	ctx := context.Background()
	e := newConfEnv(t)
	hooks := newRefundHooks(t, e)
	e.pay("evt_pnc", 74)
	if _, err := e.db.ClaimRefund(ctx, store.RefundClaim{Consumer: "order-refund", MessageID: "evt_rnc", OrderID: 74, Amount: 500,
		Reason: "requested_by_customer", Key: "refund:evt_rnc", RequestHash: "h"}); err != nil {
		t.Fatal(err)
	}
	rf := refundRow(t, e, "evt_rnc")
	if _, err := e.db.SettleRefund(ctx, store.RefundSettlement{Refund: rf, State: store.RefundFailed, Code: "not_created", Message: "none at Stripe"}); err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{"id": "re_late", "object": "refund", "status": "succeeded", "amount": 500, "currency": "usd",
		"metadata": map[string]string{"message_id": "evt_rnc"}}
	if code := hooks.deliver(t, "evt_late", "charge.refund.updated", obj); code != http.StatusOK {
		t.Fatalf("webhook answered %d", code)
	}
	if row := refundRow(t, e, "evt_rnc"); row.State != store.RefundFailed || row.RefundID != "" || refundedOf(t, e, 74) != 0 {
		t.Fatalf("row %+v, refunded %d; want it unchanged", row, refundedOf(t, e, 74))
	}
	if got := testutil.ToFloat64(hooks.metrics.RefundUpdates().WithLabelValues("not_created", "succeeded")); got != 1 {
		t.Errorf("effectively_refund_updates_total{from=not_created,to=succeeded} = %v, want 1", got)
	}
}

// TestEarlierReleaseCannotClaimAReceiptOfARefundNotSucceeded: during a
// rolling deploy a worker of a release before 00022 sends a refund's
// receipt without reading the refund: it claims the receipt's ledger row
// (store.ClaimEmail, the same statements since that release) and sends. The
// database refuses that claim (migration 00023) while the refund is pending,
// under the receipt's key and the legacy one, under either email policy, and
// accepts it once Stripe moved the money. A receipt claimed while its refund
// had succeeded cannot be taken over again once the refund failed.
func TestEarlierReleaseCannotClaimAReceiptOfARefundNotSucceeded(t *testing.T) {
	ctx := context.Background()
	e := newConfEnv(t)
	claimOf := func(id, key string, policy store.EmailPolicy) store.EmailClaim {
		return store.EmailClaim{Consumer: "order-refund", MessageID: id, Key: key, LegacyKey: "email:" + id, RequestHash: "h-" + id, Policy: policy}
	}

	e.payWith("evt_pg1", 64, "pm_card_pendingRefund")
	r, err := confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rg1", Order: 64, Amount: 700}))
	if err != nil || r.Outcome != activities.RefundPending {
		t.Fatalf("refund = %+v, %v; want pending", r, err)
	}
	for _, c := range []store.EmailClaim{
		claimOf("evt_rg1", "refundemail:evt_rg1", store.AtLeastOnce),
		claimOf("evt_rg1", "refundemail:evt_rg1", store.AtMostOnce),
		claimOf("evt_rg1", "email:evt_rg1", store.AtLeastOnce), // a release before refundemail:
	} {
		if d, row, err := e.db.ClaimEmail(ctx, c); !errors.Is(err, store.ErrRefundNotSucceeded) {
			t.Fatalf("%s claim of %s while the refund is pending = %s %+v, %v; want %v", c.Policy, c.Key, d, row, err, store.ErrRefundNotSucceeded)
		}
	}
	if n := e.rows(`SELECT count(*) FROM effects WHERE kind = 'email' AND message_id = $1`, "evt_rg1"); n != 0 {
		t.Fatalf("%d receipt rows of the pending refund; want none", n)
	}
	if err := e.stripe.SettleRefund(r.RefundID); err != nil {
		t.Fatal(err)
	}
	if c, err := confExecute(ctx, e, e.acts.CheckRefund, activities.CheckRefundInput{Consumer: "order-refund", MessageID: "evt_rg1", OrderID: 64}); err != nil || c.Outcome != activities.RefundRefunded {
		t.Fatalf("check once settled = %+v, %v", c, err)
	}
	if d, _, err := e.db.ClaimEmail(ctx, claimOf("evt_rg1", "refundemail:evt_rg1", store.AtLeastOnce)); err != nil || d != store.EmailSend {
		t.Fatalf("claim once the refund succeeded = %s, %v; want send", d, err)
	}

	// Claimed while the refund had succeeded; the refund then fails.
	e.payWith("evt_pg2", 65, "pm_card_refundFail")
	r2, err := confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_rg2", Order: 65, Amount: 700}))
	if err != nil || r2.Outcome != activities.RefundRefunded {
		t.Fatalf("refund = %+v, %v; want refunded", r2, err)
	}
	c2 := claimOf("evt_rg2", "refundemail:evt_rg2", store.AtLeastOnce)
	if d, _, err := e.db.ClaimEmail(ctx, c2); err != nil || d != store.EmailSend {
		t.Fatalf("claim while the refund succeeded = %s, %v", d, err)
	}
	if _, err := e.db.UpdateRefund(ctx, store.RefundUpdate{RefundID: r2.RefundID, Status: "failed", FailureReason: "expired_or_canceled_card", Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if d, row, err := e.db.ClaimEmail(ctx, c2); !errors.Is(err, store.ErrRefundNotSucceeded) {
		t.Fatalf("take-over once the refund failed = %s %+v, %v; want %v", d, row, err, store.ErrRefundNotSucceeded)
	}
	if row, err := e.db.Effect(ctx, "refundemail:evt_rg2"); err != nil || row.Claim != 1 {
		t.Fatalf("receipt row = %+v, %v; want it left under claim 1", row, err)
	}
}
