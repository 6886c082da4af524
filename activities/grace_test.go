package activities_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
)

// withEventWebhook serves /webhooks/sendgrid on f's store and makes the
// SendGrid simulator deliver its signed events there.
func withEventWebhook(t *testing.T, f *fixture) {
	t.Helper()
	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(f.db, nil, nil, webhook.Config{SendGridPublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if err := f.sims.SendGrid.StartWebhooks(sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: srv.URL + webhook.SendGridPath, Copies: 2, MaxDelay: 200 * time.Millisecond},
		Key:           key,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.sims.SendGrid.StopWebhooks)
}

func lostReceipt(t *testing.T, f *fixture, id string, order int64) activities.ReceiptInput {
	t.Helper()
	if _, err := run(t, f, f.acts.ChargeOrder, charge(id, order, "pm_card_visa")); err != nil {
		t.Fatal(err)
	}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultLostAfter, Times: 1})
	in := activities.ReceiptInput{Consumer: "order-placed", MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", To: "ada@example.com"}
	if _, err := run(t, f, f.acts.SendReceipt, in); err == nil {
		t.Fatal("a lost response was reported as sent")
	}
	return in
}

// Under at-least-once, a retry after a lost response waits for SendGrid's
// processed event and does not send again when it arrives.
func TestSendReceiptGraceWaitFindsTheEarlierSend(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.ResendGrace, f.acts.EventPoll = 10*time.Second, 50*time.Millisecond
	withEventWebhook(t, f)
	in := lostReceipt(t, f, "evt_g1", 31)

	start := time.Now()
	r, err := run(t, f, f.acts.SendReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptSent || r.ProviderMessageID == "" {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the retry waited %s: it should end when the event arrives", waited)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_g1"]; n != 1 {
		t.Fatalf("deliveries = %d, want 1: the retry resent although SendGrid reported the first send", n)
	}
	msgs := f.sims.SendGrid.Messages()
	if r.ProviderMessageID != msgs[len(msgs)-1].XMessageID {
		t.Fatalf("recorded %s, want the first send's X-Message-Id %s", r.ProviderMessageID, msgs[len(msgs)-1].XMessageID)
	}
	st, err := f.db.Status(context.Background(), "order-placed", "evt_g1")
	if err != nil {
		t.Fatal(err)
	}
	if rs := st.Order.ReceiptStatus; rs != store.ReceiptSent && rs != store.ReceiptDelivered {
		t.Fatalf("receipt status %s, want sent or delivered", rs)
	}
}

// Without an event, the wait is bounded: the retry resends after the grace.
func TestSendReceiptGraceWaitIsBounded(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.ResendGrace, f.acts.EventPoll = 700*time.Millisecond, 50*time.Millisecond
	in := lostReceipt(t, f, "evt_g2", 32)
	start := time.Now()
	r, err := run(t, f, f.acts.SendReceipt, in)
	if err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	if waited := time.Since(start); waited < 700*time.Millisecond {
		t.Fatalf("the retry resent after %s, before the grace", waited)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_g2"]; n != 2 {
		t.Fatalf("deliveries = %d, want 2 (no event came: the documented duplicate)", n)
	}
}

// A local attempt does not wait: it hands over to the regular activity
// with a retryable AwaitingEmailEvent, without sending.
func TestSendReceiptLocallyLeavesTheWaitToTheRegularActivity(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.ResendGrace = time.Minute
	in := lostReceipt(t, f, "evt_g3", 33)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(f.acts)
	val, err := env.ExecuteLocalActivity(f.acts.SendReceiptLocally, in)
	if err != nil {
		t.Fatal(err)
	}
	var lr activities.LocalReceipt
	if err := val.Get(&lr); err != nil {
		t.Fatal(err)
	}
	if lr.Err == nil || lr.Err.Type != activities.ErrTypeAwaitingEmailEvent || lr.Err.NonRetryable {
		t.Fatalf("local attempt = %+v, want a retryable %s", lr, activities.ErrTypeAwaitingEmailEvent)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_g3"]; n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}
