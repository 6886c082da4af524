package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stripe/stripe-go/v76"
	"go.temporal.io/api/serviceerror"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/workflows"
)

// signals records the signals sent, and fails them with err when set.
type signals struct {
	mu   sync.Mutex
	sent []sentSignal
	err  error
}

type sentSignal struct {
	WorkflowID string
	Name       string
	Arg        workflows.PaymentSettled
}

func (s *signals) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	ps, _ := arg.(workflows.PaymentSettled)
	s.sent = append(s.sent, sentSignal{WorkflowID: workflowID, Name: name, Arg: ps})
	return nil
}

func (s *signals) all() []sentSignal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentSignal(nil), s.sent...)
}

type env struct {
	t       *testing.T
	st      *store.Store
	h       *webhook.Handler
	sig     *signals
	metrics *webhook.Metrics
	logs    *bytes.Buffer
}

const (
	secretNew = "whsec_new_0123456789"
	secretOld = "whsec_old_9876543210"
)

func newEnv(t *testing.T, cfg webhook.Config) *env {
	t.Helper()
	ctx := context.Background()
	pool, err := store.Open(ctx, storetest.NewDatabase(t), store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &env{t: t, st: store.New(pool), sig: &signals{}, logs: &bytes.Buffer{}}
	e.metrics, err = webhook.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StripeSecrets == nil {
		cfg.StripeSecrets = []string{secretNew, secretOld}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	e.h, err = webhook.New(e.st, e.sig, e.metrics, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) count(provider, result string) int {
	return int(testutil.ToFloat64(e.metrics.Counter().WithLabelValues(provider, result)))
}

// claim records a claimed payment for message id, order orderID.
func (e *env) claim(id string, orderID int64) {
	e.t.Helper()
	_, err := e.st.ClaimPayment(context.Background(), store.PaymentClaim{
		Consumer: message.ConsumerOrderPlaced, MessageID: id, OrderID: orderID, Amount: 1200, Currency: "usd",
		Key: "payment:" + id, RequestHash: "h-" + id,
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) payment(id string) store.Payment {
	e.t.Helper()
	p, err := e.st.PaymentOf(context.Background(), message.ConsumerOrderPlaced, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) rows(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.st.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// stripeEvent is a Stripe event of type typ about a PaymentIntent of
// message msg.
func stripeEvent(id, typ, pi, status, msg string, extra map[string]any) []byte {
	obj := map[string]any{"id": pi, "object": "payment_intent", "status": status, "metadata": map[string]string{"message_id": msg}, "latest_charge": "ch_" + pi}
	for k, v := range extra {
		obj[k] = v
	}
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": stripe.APIVersion, "created": time.Now().Unix(), "type": typ,
		"data": map[string]any{"object": obj},
	})
	return b
}

func (e *env) postStripe(body []byte, header string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, webhook.StripePath, bytes.NewReader(body))
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func (e *env) sendStripe(body []byte) *httptest.ResponseRecorder {
	return e.postStripe(body, stripesim.SignatureHeader(body, secretNew, time.Now()))
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, want int) {
	t.Helper()
	if rec.Code != want {
		t.Fatalf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), want)
	}
}

// Copies and any order: a payment whose outcome was unknown is settled by
// the succeeded event; its copy, a late processing and the copy of that
// change nothing; the workflow is signalled for the settlement (and again
// for the copy, in case the first signal was lost).
func TestStripeCopiesAndOrderSettleOnce(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	ctx := context.Background()
	e.claim("m1", 1)
	p := e.payment("m1")
	if err := e.st.RecordPaymentUnknown(ctx, p.Consumer, p.MessageID, p.Key, 1, "lost response"); err != nil {
		t.Fatal(err)
	}

	processing := stripeEvent("evt_p1", "payment_intent.processing", "pi_1", "processing", "m1", nil)
	wantStatus(t, e.sendStripe(processing), http.StatusOK)
	if got := e.payment("m1").State; got != store.PaymentProcessing {
		t.Fatalf("after processing: state %s, want processing", got)
	}
	succeeded := stripeEvent("evt_s1", "payment_intent.succeeded", "pi_1", "succeeded", "m1", nil)
	for range 3 {
		wantStatus(t, e.sendStripe(succeeded), http.StatusOK)
	}
	late := stripeEvent("evt_p2", "payment_intent.processing", "pi_1", "processing", "m1", nil)
	wantStatus(t, e.sendStripe(late), http.StatusOK)
	wantStatus(t, e.sendStripe(late), http.StatusOK)

	got := e.payment("m1")
	if got.State != store.PaymentSucceeded || got.PaymentIntentID != "pi_1" || got.ChargeID != "ch_pi_1" {
		t.Fatalf("payment %+v, want succeeded pi_1 ch_pi_1", got)
	}
	eff, err := e.st.Effect(ctx, "payment:m1")
	if err != nil {
		t.Fatal(err)
	}
	if eff.State != store.StateSucceeded || eff.ProviderRef != "pi_1" {
		t.Fatalf("effect %s/%s, want succeeded/pi_1", eff.State, eff.ProviderRef)
	}
	if n := e.rows(`SELECT count(*) FROM orders WHERE id = 1 AND status = 'paid'`); n != 1 {
		t.Fatalf("order not paid")
	}
	if n := e.rows(`SELECT count(*) FROM processed_messages WHERE message_id = 'm1' AND outcome = 'paid'`); n != 1 {
		t.Fatalf("%d processed rows, want 1", n)
	}
	if n := e.rows(`SELECT count(*) FROM outbox WHERE event_id = 'order.paid:m1'`); n != 1 {
		t.Fatalf("%d order.paid events, want 1", n)
	}
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'stripe-events'`); n != 3 {
		t.Fatalf("%d inbox rows for stripe events, want 3 (evt_p1, evt_s1, evt_p2)", n)
	}
	if n := e.rows(`SELECT duplicates FROM inbox WHERE consumer = 'stripe-events' AND message_id = 'evt_s1'`); n != 2 {
		t.Fatalf("evt_s1 counted %d copies, want 2", n)
	}
	sent := e.sig.all()
	if len(sent) != 3 {
		t.Fatalf("%d signals, want 3 (one per succeeded copy, none for processing): %+v", len(sent), sent)
	}
	want := sentSignal{WorkflowID: "order-placed/m1", Name: workflows.PaymentSettledSignal, Arg: workflows.PaymentSettled{PaymentIntentID: "pi_1", Status: "succeeded"}}
	if sent[0] != want {
		t.Fatalf("signal %+v, want %+v", sent[0], want)
	}
	if a, d := e.count("stripe", "accepted"), e.count("stripe", "duplicate"); a != 3 || d != 3 {
		t.Fatalf("accepted %d duplicate %d, want 3 and 3", a, d)
	}
}

// A payment_failed after succeeded is kept as an anomaly, not applied, and
// no workflow is told the payment failed.
func TestStripeFailedAfterSucceededIsAnAnomaly(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m2", 2)
	wantStatus(t, e.sendStripe(stripeEvent("evt_s2", "payment_intent.succeeded", "pi_2", "succeeded", "m2", nil)), http.StatusOK)
	failed := stripeEvent("evt_f2", "payment_intent.payment_failed", "pi_2", "requires_payment_method", "m2",
		map[string]any{"last_payment_error": map[string]string{"code": "card_declined", "decline_code": "generic_decline"}})
	wantStatus(t, e.sendStripe(failed), http.StatusOK)
	wantStatus(t, e.sendStripe(failed), http.StatusOK)

	if got := e.payment("m2"); got.State != store.PaymentSucceeded || got.FailureCode != "" {
		t.Fatalf("payment %+v, want succeeded untouched", got)
	}
	anomalies, err := e.st.OpenPaymentAnomalies(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(anomalies) != 1 || anomalies[0].EventID != "evt_f2" || anomalies[0].RecordedState != "succeeded" || anomalies[0].MessageID != "m2" {
		t.Fatalf("anomalies %+v, want one for evt_f2 on m2", anomalies)
	}
	for _, s := range e.sig.all() {
		if s.Arg.Status != "succeeded" {
			t.Fatalf("workflow signalled %+v after the contradiction", s)
		}
	}
}

// payment_failed and canceled settle a payment that has no outcome yet,
// with Stripe's codes, and signal the workflow.
func TestStripeFailureSettlesAndSignals(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m3", 3)
	e.claim("m4", 4)
	failed := stripeEvent("evt_f3", "payment_intent.payment_failed", "pi_3", "requires_payment_method", "m3",
		map[string]any{"last_payment_error": map[string]string{"code": "card_declined", "decline_code": "insufficient_funds", "message": "Your card has insufficient funds."}})
	wantStatus(t, e.sendStripe(failed), http.StatusOK)
	canceled := stripeEvent("evt_c4", "payment_intent.canceled", "pi_4", "canceled", "m4", map[string]any{"cancellation_reason": "abandoned"})
	wantStatus(t, e.sendStripe(canceled), http.StatusOK)
	// A late succeeded for the failed one: an anomaly, the failure stands.
	wantStatus(t, e.sendStripe(stripeEvent("evt_s3", "payment_intent.succeeded", "pi_3", "succeeded", "m3", nil)), http.StatusOK)

	if got := e.payment("m3"); got.State != store.PaymentFailed || got.FailureCode != "card_declined" || got.DeclineCode != "insufficient_funds" {
		t.Fatalf("m3 %+v, want failed card_declined/insufficient_funds", got)
	}
	if got := e.payment("m4"); got.State != store.PaymentFailed || got.FailureCode != "canceled" {
		t.Fatalf("m4 %+v, want failed canceled", got)
	}
	if n := e.rows(`SELECT count(*) FROM orders WHERE id IN (3, 4) AND status = 'payment_failed'`); n != 2 {
		t.Fatalf("%d orders payment_failed, want 2", n)
	}
	if n := e.rows(`SELECT count(*) FROM payment_anomalies WHERE event_id = 'evt_s3'`); n != 1 {
		t.Fatalf("late succeeded after failed not kept as an anomaly")
	}
	sent := e.sig.all()
	if len(sent) != 2 || sent[0].Arg.DeclineCode != "insufficient_funds" || sent[1].Arg.Status != "canceled" {
		t.Fatalf("signals %+v, want the failure and the cancellation", sent)
	}
}

// charge.refunded is recorded against the message it refunds.
func TestStripeRefundRecorded(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m5", 5)
	b, _ := json.Marshal(map[string]any{
		"id": "evt_r5", "object": "event", "api_version": stripe.APIVersion, "type": "charge.refunded",
		"data": map[string]any{"object": map[string]any{"id": "ch_5", "object": "charge", "payment_intent": "pi_5", "amount_refunded": 1200, "currency": "usd", "refunded": true, "metadata": map[string]string{"message_id": "m5"}}},
	})
	wantStatus(t, e.sendStripe(b), http.StatusOK)
	wantStatus(t, e.sendStripe(b), http.StatusOK)
	if n := e.rows(`SELECT count(*) FROM stripe_refunds WHERE event_id = 'evt_r5' AND message_id = 'm5' AND amount_refunded = 1200 AND refunded`); n != 1 {
		t.Fatalf("refund not recorded against m5")
	}
}

// Refused requests: 4xx, counted, logged without the body, nothing recorded.
func TestStripeRefusesUnverifiedRequests(t *testing.T) {
	e := newEnv(t, webhook.Config{StripeTolerance: time.Minute, StripeMaxBody: 4096})
	e.claim("m6", 6)
	body := stripeEvent("evt_x6", "payment_intent.succeeded", "pi_6", "succeeded", "m6", map[string]any{"description": "SECRET-BODY-MARKER"})
	cases := []struct {
		name, header string
		body         []byte
		status       int
		result       string
	}{
		{"missing signature", "", body, http.StatusUnauthorized, "bad_signature"},
		{"wrong secret", stripesim.SignatureHeader(body, "whsec_someone_else", time.Now()), body, http.StatusUnauthorized, "bad_signature"},
		{"tampered body", stripesim.SignatureHeader(body, secretNew, time.Now()), bytes.Replace(body, []byte("pi_6"), []byte("pi_7"), 1), http.StatusUnauthorized, "bad_signature"},
		{"garbage header", "nonsense", body, http.StatusUnauthorized, "bad_signature"},
		{"stale timestamp", stripesim.SignatureHeader(body, secretNew, time.Now().Add(-2*time.Minute)), body, http.StatusBadRequest, "stale"},
		{"oversized body", "", append(body, bytes.Repeat([]byte(" "), 5000)...), http.StatusRequestEntityTooLarge, "too_large"},
	}
	for _, c := range cases {
		header := c.header
		if c.result == "too_large" {
			header = stripesim.SignatureHeader(c.body, secretNew, time.Now())
		}
		rec := e.postStripe(c.body, header)
		if rec.Code != c.status {
			t.Errorf("%s: status %d, want %d", c.name, rec.Code, c.status)
		}
	}
	if n := e.count("stripe", "bad_signature"); n != 4 {
		t.Errorf("bad_signature counted %d, want 4", n)
	}
	if e.count("stripe", "stale") != 1 || e.count("stripe", "too_large") != 1 {
		t.Errorf("stale %d too_large %d, want 1 and 1", e.count("stripe", "stale"), e.count("stripe", "too_large"))
	}
	if n := e.rows(`SELECT count(*) FROM inbox`); n != 0 {
		t.Errorf("%d inbox rows after refused requests, want 0", n)
	}
	if got := e.payment("m6").State; got != store.PaymentClaimed {
		t.Errorf("payment %s after refused requests, want claimed", got)
	}
	if strings.Contains(e.logs.String(), "SECRET-BODY-MARKER") || strings.Contains(e.logs.String(), secretNew) {
		t.Errorf("a log line carries the body or the secret:\n%s", e.logs)
	}
	if !strings.Contains(e.logs.String(), "result=stale") {
		t.Errorf("refusals not logged:\n%s", e.logs)
	}
	if len(e.sig.all()) != 0 {
		t.Errorf("a refused request signalled a workflow")
	}
}

// During a rotation both secrets verify; a secret not configured does not.
func TestStripeSecretRotation(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m7", 7)
	e.claim("m8", 8)
	byOld := stripeEvent("evt_o7", "payment_intent.succeeded", "pi_7", "succeeded", "m7", nil)
	wantStatus(t, e.postStripe(byOld, stripesim.SignatureHeader(byOld, secretOld, time.Now())), http.StatusOK)
	byNew := stripeEvent("evt_n8", "payment_intent.succeeded", "pi_8", "succeeded", "m8", nil)
	wantStatus(t, e.postStripe(byNew, stripesim.SignatureHeader(byNew, secretNew, time.Now())), http.StatusOK)
	if e.payment("m7").State != store.PaymentSucceeded || e.payment("m8").State != store.PaymentSucceeded {
		t.Fatal("an event signed with a configured secret was not applied")
	}

	retired := newEnv(t, webhook.Config{StripeSecrets: []string{secretNew}})
	retired.claim("m9", 9)
	byRetired := stripeEvent("evt_o9", "payment_intent.succeeded", "pi_9", "succeeded", "m9", nil)
	wantStatus(t, retired.postStripe(byRetired, stripesim.SignatureHeader(byRetired, secretOld, time.Now())), http.StatusUnauthorized)
	if retired.payment("m9").State != store.PaymentClaimed {
		t.Fatal("an event signed with a retired secret was applied")
	}
}

// A closed or missing workflow is not an error; a failing signal is a 5xx,
// so Stripe retries, and the retry signals again.
func TestStripeSignalFailures(t *testing.T) {
	e := newEnv(t, webhook.Config{})
	e.claim("m10", 10)
	e.claim("m11", 11)
	e.sig.err = serviceerror.NewNotFound("workflow not found")
	wantStatus(t, e.sendStripe(stripeEvent("evt_10", "payment_intent.succeeded", "pi_10", "succeeded", "m10", nil)), http.StatusOK)

	e.sig.err = errors.New("temporal unavailable")
	ev := stripeEvent("evt_11", "payment_intent.succeeded", "pi_11", "succeeded", "m11", nil)
	wantStatus(t, e.sendStripe(ev), http.StatusServiceUnavailable)
	if e.payment("m11").State != store.PaymentSucceeded {
		t.Fatal("the ledger was not settled before the signal")
	}
	e.sig.err = nil
	wantStatus(t, e.sendStripe(ev), http.StatusOK)
	if sent := e.sig.all(); len(sent) != 1 || sent[0].WorkflowID != "order-placed/m11" {
		t.Fatalf("signals %+v, want one for m11 on the retry", sent)
	}
}

// sendgridEnv builds an env with a SendGrid key.
func sendgridEnv(t *testing.T, tolerance time.Duration, maxBody int64) (*env, func(body []byte, at time.Time) *httptest.ResponseRecorder) {
	t.Helper()
	return sendgridEnvWith(t, webhook.Config{SendGridTolerance: tolerance, SendGridMaxBody: maxBody})
}

// sendgridEnvWith builds an env with a SendGrid key and cfg.
func sendgridEnvWith(t *testing.T, cfg webhook.Config) (*env, func(body []byte, at time.Time) *httptest.ResponseRecorder) {
	t.Helper()
	priv, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg.SendGridPublicKey = pub
	e := newEnv(t, cfg)
	post := func(body []byte, at time.Time) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, webhook.SendGridPath, bytes.NewReader(body))
		if !at.IsZero() {
			for k, v := range sendgridsim.SignatureHeaders(body, priv, at) {
				req.Header[k] = v
			}
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		return rec
	}
	return e, post
}

func sgBatch(events ...map[string]any) []byte {
	b, _ := json.Marshal(events)
	return b
}

func sgEvent(id, event, key string) map[string]any {
	return map[string]any{"sg_event_id": id, "event": event, "sg_message_id": "XMSG" + key[len("email:"):] + ".filter0.1", "timestamp": time.Now().Unix(),
		"email": "buyer@example.com", "idempotency_key": key, "message_id": key[len("email:"):]}
}

// claimEmail records a paid order whose receipt is being sent.
func (e *env) claimEmail(id string, orderID int64, policy store.EmailPolicy) store.Effect {
	e.t.Helper()
	e.claim(id, orderID)
	_, eff, err := e.st.ClaimEmail(context.Background(), store.EmailClaim{
		Consumer: message.ConsumerOrderPlaced, MessageID: id, OrderID: orderID, Key: "email:" + id, RequestHash: "r-" + id, Policy: policy,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return eff
}

func (e *env) receipt(orderID int64) string {
	e.t.Helper()
	var s string
	if err := e.st.Pool().QueryRow(context.Background(), `SELECT receipt_status FROM orders WHERE id = $1`, orderID).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// A batch sets the receipt status; copies and late events never move it
// back; the activity's own record does not either.
func TestSendGridEventsSetReceiptStatus(t *testing.T) {
	e, post := sendgridEnv(t, 0, 0)
	ctx := context.Background()
	eff := e.claimEmail("r1", 21, store.AtLeastOnce)
	processed, delivered := sgEvent("sg1", "processed", "email:r1"), sgEvent("sg2", "delivered", "email:r1")
	foreign := map[string]any{"sg_event_id": "sg9", "event": "delivered", "email": "x@example.com"}
	// Out of order: delivered first, then processed, then copies.
	wantStatus(t, post(sgBatch(delivered, foreign), time.Now()), http.StatusOK)
	wantStatus(t, post(sgBatch(processed), time.Now()), http.StatusOK)
	wantStatus(t, post(sgBatch(processed, delivered), time.Now()), http.StatusOK)
	if got := e.receipt(21); got != store.ReceiptDelivered {
		t.Fatalf("receipt %s, want delivered", got)
	}
	if _, err := e.st.RecordEmailSent(ctx, "email:r1", eff.Claim, 21, "XMSGr1"); err != nil {
		t.Fatal(err)
	}
	if got := e.receipt(21); got != store.ReceiptDelivered {
		t.Fatalf("receipt %s after the activity's record, want delivered kept", got)
	}
	x, ok, err := e.st.EmailAccepted(ctx, "email:r1")
	if err != nil || !ok || x != "XMSGr1" {
		t.Fatalf("EmailAccepted = %q %v %v, want XMSGr1 true", x, ok, err)
	}
	wantStatus(t, post(sgBatch(sgEvent("sg3", "bounce", "email:r1")), time.Now()), http.StatusOK)
	if got := e.receipt(21); got != store.ReceiptBounced {
		t.Fatalf("receipt %s after a bounce, want bounced", got)
	}
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'sendgrid-events'`); n != 4 {
		t.Fatalf("%d sendgrid inbox rows, want 4 (sg1, sg2, sg3, sg9)", n)
	}
	if a, d := e.count("sendgrid", "accepted"), e.count("sendgrid", "duplicate"); a != 3 || d != 1 {
		t.Fatalf("accepted %d duplicate %d, want 3 and 1", a, d)
	}
}

// Under at-most-once, a receipt recorded unknown becomes sent once SendGrid
// reports the mail.
func TestSendGridSettlesUnknownReceipt(t *testing.T) {
	e, post := sendgridEnv(t, 0, 0)
	ctx := context.Background()
	e.claimEmail("r2", 22, store.AtMostOnce)
	// The attempt died after sending; the retry finds in_flight and marks
	// the receipt unknown.
	decision, _, err := e.st.ClaimEmail(ctx, store.EmailClaim{
		Consumer: message.ConsumerOrderPlaced, MessageID: "r2", OrderID: 22, Key: "email:r2", RequestHash: "r-r2", Policy: store.AtMostOnce,
	})
	if err != nil || decision != store.EmailUnknown {
		t.Fatalf("retry decision %s %v, want unknown", decision, err)
	}
	wantStatus(t, post(sgBatch(sgEvent("sg21", "processed", "email:r2")), time.Now()), http.StatusOK)
	eff, err := e.st.Effect(ctx, "email:r2")
	if err != nil {
		t.Fatal(err)
	}
	if eff.State != store.StateSucceeded || eff.ProviderRef != "XMSGr2" {
		t.Fatalf("effect %s/%s, want succeeded/XMSGr2", eff.State, eff.ProviderRef)
	}
	if got := e.receipt(22); got != store.ReceiptSent {
		t.Fatalf("receipt %s, want sent", got)
	}

	// An in_flight row whose event arrived before the retry is settled as
	// sent by the retry, not marked unknown.
	e.claimEmail("r3", 23, store.AtMostOnce)
	wantStatus(t, post(sgBatch(sgEvent("sg31", "processed", "email:r3")), time.Now()), http.StatusOK)
	decision, _, err = e.st.ClaimEmail(ctx, store.EmailClaim{
		Consumer: message.ConsumerOrderPlaced, MessageID: "r3", OrderID: 23, Key: "email:r3", RequestHash: "r-r3", Policy: store.AtMostOnce,
	})
	if err != nil || decision != store.EmailDone {
		t.Fatalf("retry decision %s %v, want done (the event proves the send)", decision, err)
	}
	if got := e.receipt(23); got != store.ReceiptSent {
		t.Fatalf("receipt %s, want sent", got)
	}
}

// Refused batches: 4xx, counted, nothing recorded.
func TestSendGridRefusesUnverifiedRequests(t *testing.T) {
	e, post := sendgridEnv(t, time.Minute, 2048)
	e.claimEmail("r4", 24, store.AtLeastOnce)
	body := sgBatch(sgEvent("sg41", "processed", "email:r4"))

	wantStatus(t, post(body, time.Time{}), http.StatusUnauthorized) // no headers
	_, otherPub, _ := sendgridsim.GenerateWebhookKey()
	_ = otherPub
	wantStatus(t, post(body, time.Now().Add(-2*time.Minute)), http.StatusBadRequest) // stale
	wantStatus(t, post(body, time.Now().Add(2*time.Minute)), http.StatusBadRequest)  // from the future
	big := sgBatch(sgEvent("sg42", "processed", "email:r4"), map[string]any{"sg_event_id": "pad", "pad": strings.Repeat("x", 3000)})
	wantStatus(t, post(big, time.Now()), http.StatusRequestEntityTooLarge)

	// Signed by another key.
	otherPriv, _, _ := sendgridsim.GenerateWebhookKey()
	req := httptest.NewRequest(http.MethodPost, webhook.SendGridPath, bytes.NewReader(body))
	for k, v := range sendgridsim.SignatureHeaders(body, otherPriv, time.Now()) {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	wantStatus(t, rec, http.StatusUnauthorized)

	if got := fmt.Sprint(e.count("sendgrid", "bad_signature"), e.count("sendgrid", "stale"), e.count("sendgrid", "too_large")); got != "2 2 1" {
		t.Fatalf("bad_signature, stale, too_large counted %s, want 2 2 1", got)
	}
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'sendgrid-events'`) + e.rows(`SELECT count(*) FROM email_events`); n != 0 {
		t.Fatalf("%d rows recorded from refused batches", n)
	}
	if got := e.receipt(24); got != "sending" {
		t.Fatalf("receipt %s, want sending", got)
	}
}

// TestSendGridEventOfAnOrderReceiptsOtherKey: an order's receipt claimed
// under "orderemail:<id>" (its "email:<id>" held by a refund receipt of an
// earlier release) is ours: SendGrid's events for it are applied and prove
// its send, as for "email:<id>".
func TestSendGridEventOfAnOrderReceiptsOtherKey(t *testing.T) {
	e, post := sendgridEnv(t, 0, 0)
	ctx := context.Background()
	e.claim("r8", 28)
	if _, _, err := e.st.ClaimEmail(ctx, store.EmailClaim{
		Consumer: message.ConsumerOrderPlaced, MessageID: "r8", OrderID: 28, Key: "orderemail:r8", RequestHash: "r-r8", Policy: store.AtLeastOnce,
	}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, post(sgBatch(sgEvent("sg81", "delivered", "orderemail:r8")), time.Now()), http.StatusOK)
	if got := e.receipt(28); got != store.ReceiptDelivered {
		t.Fatalf("receipt %s, want delivered by the event naming orderemail:r8", got)
	}
	if _, ok, err := e.st.EmailAccepted(ctx, "orderemail:r8"); err != nil || !ok {
		t.Fatalf("EmailAccepted(orderemail:r8) = %v, %v; want the event to prove the send", ok, err)
	}
}
