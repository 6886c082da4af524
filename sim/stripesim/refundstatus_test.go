package stripesim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/sim/simfault"
)

// testClock is a settable clock, safe to read from the server's goroutines.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Unix(1_700_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// paidWith charges 1500 with test payment method pm and returns the
// PaymentIntent's ID.
func paidWith(t *testing.T, ts *httptest.Server, messageID, pm string) string {
	t.Helper()
	pi, err := newClient(t, ts, 0).New(chargeParams("payment:"+messageID, messageID, 1500, pm))
	if err != nil || pi.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("charge with %s = %+v, %v", pm, pi, err)
	}
	return pi.ID
}

// startReceiver delivers the simulator's events to a verifying receiver.
func startReceiver(t *testing.T, sim *Server) *receiver {
	t.Helper()
	rc := &receiver{secret: "whsec_test_" + randomStem()}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	if err := sim.StartWebhooks(WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL, RetryInitial: 10 * time.Millisecond},
		Secret:        rc.secret,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.StopWebhooks)
	return rc
}

// refundUpdates returns the Refunds of the charge.refund.updated events
// received, in order of arrival.
func refundUpdates(t *testing.T, rc *receiver) []stripe.Refund {
	t.Helper()
	var out []stripe.Refund
	for _, ev := range rc.events() {
		if ev.Type != EventChargeRefundUpdated {
			continue
		}
		var r stripe.Refund
		if err := json.Unmarshal(ev.Data.Raw, &r); err != nil {
			t.Fatalf("event %s: %v", ev.ID, err)
		}
		out = append(out, r)
	}
	return out
}

// settleRefundEndpoint posts body to /_sim/refunds/settle and returns the
// status.
func settleRefundEndpoint(t *testing.T, ts *httptest.Server, contentType, body string) int {
	t.Helper()
	resp, err := http.Post(ts.URL+"/_sim/refunds/settle", contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestPendingRefundSucceedsAfterTheDelay: a refund of a
// pm_card_pendingRefund charge is created pending, counts against what
// remains refundable, succeeds by itself RefundSettleDelay later (seen at
// the next retrieve) with a charge.refund.updated, and a replay of its
// creation still answers pending.
func TestPendingRefundSucceedsAfterTheDelay(t *testing.T) {
	clock := newTestClock()
	sim, ts := newSim(t, Options{Now: clock.Now, RefundSettleDelay: time.Hour})
	rc := startReceiver(t, sim)
	refunds := refundClient(t, ts)
	pi := paidWith(t, ts, "evt_p", "pm_card_pendingRefund")

	r, err := refunds.New(refundParamsFor(pi, "refund:p1", "p1", 500))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != stripe.RefundStatusPending || r.FailureReason != "" {
		t.Fatalf("created = %s %q, want pending, no failure_reason", r.Status, r.FailureReason)
	}
	// The pending 500 counts: 1100 more would exceed the 1500.
	_, err = refunds.New(refundParamsFor(pi, "refund:p2", "p2", 1100))
	if se := stripeErr(t, err); se.Code != codeAmountTooLarge {
		t.Errorf("refund past a pending one = %+v", se)
	}
	clock.Add(time.Hour - time.Second)
	if got, err := refunds.Get(r.ID, nil); err != nil || got.Status != stripe.RefundStatusPending {
		t.Fatalf("before the delay = %+v, %v; want pending", got, err)
	}
	if ws := sim.WebhookStats(); ws.Enqueued != 1 { // payment_intent.succeeded only
		t.Errorf("events enqueued before the change = %d, want 1", ws.Enqueued)
	}
	clock.Add(time.Second)
	got, err := refunds.Get(r.ID, nil)
	if err != nil || got.Status != stripe.RefundStatusSucceeded || got.FailureReason != "" {
		t.Fatalf("after the delay = %+v, %v; want succeeded", got, err)
	}
	// The replay answers what the creation answered.
	again, err := refunds.New(refundParamsFor(pi, "refund:p1", "p1", 500))
	if err != nil || !replayed(again.LastResponse.Header) || again.ID != r.ID || again.Status != stripe.RefundStatusPending {
		t.Errorf("replay = %+v, %v; want %s pending, replayed", again, err, r.ID)
	}
	if err := sim.SettleRefund(r.ID); !errors.Is(err, ErrNoRefundToSettle) {
		t.Errorf("SettleRefund of a succeeded refund = %v, want ErrNoRefundToSettle", err)
	}
	waitFor(t, "charge.refund.updated", func() bool { return len(refundUpdates(t, rc)) >= 1 })
	time.Sleep(50 * time.Millisecond)
	updates := refundUpdates(t, rc)
	if len(updates) != 1 || updates[0].ID != r.ID || updates[0].Status != stripe.RefundStatusSucceeded ||
		updates[0].Amount != 500 || updates[0].PaymentIntent == nil || updates[0].PaymentIntent.ID != pi ||
		updates[0].Metadata["message_id"] != "p1" {
		t.Errorf("charge.refund.updated = %+v, want one with %s succeeded", updates, r.ID)
	}
	for _, ev := range rc.events() {
		if ev.Type == EventChargeRefunded {
			t.Errorf("a refund created through the API delivered %s", ev.Type)
		}
	}
	if st := sim.Stats(); st.Refunds != 1 || st.RefundedAmount != 500 || st.RefundsFailed != 0 || st.RefundsRefused != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// TestPendingRefundSucceedsAtList: the delay is also seen by the list.
func TestPendingRefundSucceedsAtList(t *testing.T) {
	clock := newTestClock()
	_, ts := newSim(t, Options{Now: clock.Now, RefundSettleDelay: time.Minute})
	refunds := refundClient(t, ts)
	pi := paidWith(t, ts, "evt_l", "pm_card_pendingRefund")
	r, err := refunds.New(refundParamsFor(pi, "refund:l", "l", 1500))
	if err != nil || r.Status != stripe.RefundStatusPending {
		t.Fatalf("created = %+v, %v", r, err)
	}
	list := func() stripe.RefundStatus {
		it := refunds.List(&stripe.RefundListParams{PaymentIntent: stripe.String(pi)})
		var got []*stripe.Refund
		for it.Next() {
			got = append(got, it.Refund())
		}
		if it.Err() != nil || len(got) != 1 || got[0].ID != r.ID {
			t.Fatalf("list = %v, %v", got, it.Err())
		}
		return got[0].Status
	}
	if s := list(); s != stripe.RefundStatusPending {
		t.Fatalf("listed before the delay: %s", s)
	}
	clock.Add(time.Minute)
	if s := list(); s != stripe.RefundStatusSucceeded {
		t.Fatalf("listed after the delay: %s, want succeeded", s)
	}
}

// TestRefundFailGivesTheAmountBack: a refund of a pm_card_refundFail charge
// is created succeeded; with no delay it stays so until SettleRefund, which
// fails it (failure_reason expired_or_canceled_card) with a
// charge.refund.updated, and its amount is refundable again.
func TestRefundFailGivesTheAmountBack(t *testing.T) {
	clock := newTestClock()
	sim, ts := newSim(t, Options{Now: clock.Now})
	rc := startReceiver(t, sim)
	refunds := refundClient(t, ts)
	pi := paidWith(t, ts, "evt_f", "pm_card_refundFail")

	r, err := refunds.New(refundParamsFor(pi, "refund:f1", "f1", 1500))
	if err != nil || r.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("created = %+v, %v; want succeeded", r, err)
	}
	_, err = refunds.New(refundParamsFor(pi, "refund:f2", "f2", 1))
	if se := stripeErr(t, err); se.Code != codeChargeAlreadyRefunded {
		t.Fatalf("refund of a refunded charge = %+v", se)
	}
	clock.Add(1000 * time.Hour) // a zero RefundSettleDelay: never by itself
	if got, err := refunds.Get(r.ID, nil); err != nil || got.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("without a delay = %+v, %v; want still succeeded", got, err)
	}
	if err := sim.SettleRefund(r.ID); err != nil {
		t.Fatal(err)
	}
	if err := sim.SettleRefund(r.ID); !errors.Is(err, ErrNoRefundToSettle) {
		t.Errorf("second SettleRefund = %v, want ErrNoRefundToSettle", err)
	}
	got, err := refunds.Get(r.ID, nil)
	if err != nil || got.Status != stripe.RefundStatusFailed || got.FailureReason != stripe.RefundFailureReasonExpiredOrCanceledCard {
		t.Fatalf("after SettleRefund = %+v, %v; want failed, expired_or_canceled_card", got, err)
	}
	// The 1500 is back: it can be refunded again, and not beyond.
	r2, err := refunds.New(refundParamsFor(pi, "refund:f3", "f3", 1500))
	if err != nil || r2.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("refund after the failure = %+v, %v", r2, err)
	}
	_, err = refunds.New(refundParamsFor(pi, "refund:f4", "f4", 1))
	if se := stripeErr(t, err); se.Code != codeChargeAlreadyRefunded {
		t.Errorf("refund past the second one = %+v", se)
	}
	if st := sim.Stats(); st.Refunds != 2 || st.RefundsFailed != 1 || st.RefundedAmount != 1500 || st.RefundsRefused != 2 {
		t.Errorf("stats = %+v", st)
	}
	waitFor(t, "charge.refund.updated", func() bool { return len(refundUpdates(t, rc)) >= 1 })
	time.Sleep(50 * time.Millisecond)
	updates := refundUpdates(t, rc)
	if len(updates) != 1 || updates[0].ID != r.ID || updates[0].Status != stripe.RefundStatusFailed ||
		updates[0].FailureReason != stripe.RefundFailureReasonExpiredOrCanceledCard {
		t.Errorf("charge.refund.updated = %+v, want one with %s failed", updates, r.ID)
	}
}

// TestRefundFailAfterTheDelay: with RefundSettleDelay a refund of a
// pm_card_refundFail charge fails by itself, seen by a new refund of the
// same PaymentIntent, which may then take the amount again.
func TestRefundFailAfterTheDelay(t *testing.T) {
	clock := newTestClock()
	sim, ts := newSim(t, Options{Now: clock.Now, RefundSettleDelay: time.Hour})
	refunds := refundClient(t, ts)
	pi := paidWith(t, ts, "evt_d", "pm_card_refundFail")
	r, err := refunds.New(refundParamsFor(pi, "refund:d1", "d1", 1000))
	if err != nil || r.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("created = %+v, %v", r, err)
	}
	clock.Add(time.Hour)
	if _, err := refunds.New(refundParamsFor(pi, "refund:d2", "d2", 1500)); err != nil {
		t.Fatalf("the full amount once the first refund failed: %v", err)
	}
	if got, err := refunds.Get(r.ID, nil); err != nil || got.Status != stripe.RefundStatusFailed {
		t.Fatalf("first refund = %+v, %v; want failed", got, err)
	}
	if st := sim.Stats(); st.Refunds != 2 || st.RefundsFailed != 1 || st.RefundedAmount != 1500 {
		t.Errorf("stats = %+v", st)
	}
}

// TestSettleRefundEndpoint: POST /_sim/refunds/settle takes the form
// id=re_… or {"id":"re_…"}, answers 404 for a refund with nothing to
// change and 400 without an id.
func TestSettleRefundEndpoint(t *testing.T) {
	_, ts := newSim(t, Options{})
	refunds := refundClient(t, ts)
	pending, err := refunds.New(refundParamsFor(paidWith(t, ts, "evt_e1", "pm_card_pendingRefund"), "refund:e1", "e1", 100))
	if err != nil {
		t.Fatal(err)
	}
	failing, err := refunds.New(refundParamsFor(paidWith(t, ts, "evt_e2", "pm_card_refundFail"), "refund:e2", "e2", 100))
	if err != nil {
		t.Fatal(err)
	}
	const form = "application/x-www-form-urlencoded"
	if code := settleRefundEndpoint(t, ts, form, url.Values{"id": {pending.ID}}.Encode()); code != http.StatusOK {
		t.Errorf("settle (form) = %d", code)
	}
	if code := settleRefundEndpoint(t, ts, form, url.Values{"id": {pending.ID}}.Encode()); code != http.StatusNotFound {
		t.Errorf("settle again = %d, want 404", code)
	}
	if code := settleRefundEndpoint(t, ts, "application/json", `{"id":"`+failing.ID+`"}`); code != http.StatusOK {
		t.Errorf("settle (JSON) = %d", code)
	}
	if code := settleRefundEndpoint(t, ts, form, "id=re_nope"); code != http.StatusNotFound {
		t.Errorf("settle of a missing refund = %d, want 404", code)
	}
	if code := settleRefundEndpoint(t, ts, form, ""); code != http.StatusBadRequest {
		t.Errorf("settle without an id = %d, want 400", code)
	}
	if got, err := refunds.Get(pending.ID, nil); err != nil || got.Status != stripe.RefundStatusSucceeded {
		t.Errorf("pending refund after the endpoint = %+v, %v", got, err)
	}
	if got, err := refunds.Get(failing.ID, nil); err != nil || got.Status != stripe.RefundStatusFailed {
		t.Errorf("failing refund after the endpoint = %+v, %v", got, err)
	}
}

// TestNormalRefundDoesNotMove: a refund of a pm_card_visa charge is
// succeeded, has no failure_reason, never changes, and SettleRefund and the
// endpoint refuse it.
func TestNormalRefundDoesNotMove(t *testing.T) {
	clock := newTestClock()
	sim, ts := newSim(t, Options{Now: clock.Now, RefundSettleDelay: time.Second})
	refunds := refundClient(t, ts)
	pi := paidWith(t, ts, "evt_n", "pm_card_visa")
	r, err := refunds.New(refundParamsFor(pi, "refund:n", "n", 1500))
	if err != nil || r.Status != stripe.RefundStatusSucceeded {
		t.Fatalf("created = %+v, %v", r, err)
	}
	if strings.Contains(string(r.LastResponse.RawJSON), "failure_reason") {
		t.Errorf("a succeeded refund shows failure_reason: %s", r.LastResponse.RawJSON)
	}
	rc := startReceiver(t, sim)
	clock.Add(time.Hour)
	if got, err := refunds.Get(r.ID, nil); err != nil || got.Status != stripe.RefundStatusSucceeded {
		t.Errorf("after the delay = %+v, %v; want succeeded", got, err)
	}
	if err := sim.SettleRefund(r.ID); !errors.Is(err, ErrNoRefundToSettle) {
		t.Errorf("SettleRefund = %v, want ErrNoRefundToSettle", err)
	}
	if code := settleRefundEndpoint(t, ts, "application/x-www-form-urlencoded", "id="+r.ID); code != http.StatusNotFound {
		t.Errorf("endpoint = %d, want 404", code)
	}
	if err := sim.SettleRefund("re_nope"); !errors.Is(err, ErrNoRefundToSettle) {
		t.Errorf("SettleRefund of a missing refund = %v", err)
	}
	_, err = refunds.New(refundParamsFor(pi, "refund:n2", "n2", 1))
	if se := stripeErr(t, err); se.Code != codeChargeAlreadyRefunded {
		t.Errorf("refund of a refunded charge = %+v", se)
	}
	time.Sleep(50 * time.Millisecond)
	if n := sim.WebhookStats().Enqueued; n != 0 || len(rc.events()) != 0 {
		t.Errorf("%d events enqueued, %d received; want none", n, len(rc.events()))
	}
	if st := sim.Stats(); st.Refunds != 1 || st.RefundsFailed != 0 || st.RefundedAmount != 1500 {
		t.Errorf("stats = %+v", st)
	}
}
