package activities_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
)

// The world one conformance case runs in (conformance_test.go): a fresh
// database, fresh simulators each behind a proxy the case can hook, the real
// stripe-go and sendgrid-go clients, the worker's webhook handler with
// SendGrid's Event Webhook delivered to it, and one clock for the activities
// and the Stripe simulator.

const (
	confStripeKey   = "sk_test_conformance"
	confSendGridKey = "SG.conformance"
	confStripeHook  = "whsec_conformance"
	// confGrace is the activities' ResendGrace: how long a receipt retry
	// that may follow an accepted send waits for SendGrid's event.
	confGrace = 2 * time.Second
)

type confEnv struct {
	t        *testing.T
	acts     *activities.Activities
	db       *store.Store
	stripe   *stripesim.Server
	sendgrid *sendgridsim.Server
	// stripeProxy and sendgridProxy sit between the clients and the
	// simulators (confProxy).
	stripeProxy, sendgridProxy *confProxy
	stripeURL, sendgridURL     string
	// hooks is the worker's webhook handler (/webhooks/stripe and
	// /webhooks/sendgrid); the SendGrid simulator delivers its events to it.
	hooks *webhook.Handler
	sgKey *ecdsa.PrivateKey
	clock *confClock
	seq   atomic.Int64
	// paid is the PaymentIntent of each order pay paid, by message ID.
	paid sync.Map
	// intake holds, by message ID, the refund claims the intake took
	// (confIntakeRefundKind) until an attempt takes one.
	intake sync.Map
	// down is set while the case holds the database away (databaseDown).
	down atomic.Bool
}

func newConfEnv(t *testing.T) *confEnv {
	t.Helper()
	e := &confEnv{t: t, clock: &confClock{}}
	e.stripe = stripesim.New(stripesim.Options{Now: e.clock.Now})
	e.sendgrid = sendgridsim.New(sendgridsim.Options{APIKey: confSendGridKey})
	e.stripeProxy, e.sendgridProxy = &confProxy{next: e.stripe}, &confProxy{next: e.sendgrid}
	st := httptest.NewServer(e.stripeProxy)
	sg := httptest.NewServer(e.sendgridProxy)
	t.Cleanup(st.Close)
	t.Cleanup(sg.Close)
	e.stripeURL, e.sendgridURL = st.URL, sg.URL
	e.db = store.New(storetest.NewPool(t))

	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	e.sgKey = key
	e.hooks, err = webhook.New(e.db, confSignaler{}, nil, webhook.Config{StripeSecrets: []string{confStripeHook}, SendGridPublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.hooks)
	t.Cleanup(hs.Close)
	if err := e.sendgrid.StartWebhooks(sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hs.URL + webhook.SendGridPath, RetryInitial: 20 * time.Millisecond},
		Key:           key,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.sendgrid.StopWebhooks)

	e.acts = &activities.Activities{
		Store: e.db, Payments: e.paymentClient(confStripeKey), Mailer: e.emailClient(confSendGridKey),
		EmailPolicy: store.AtLeastOnce, AmbiguousAttempts: 2, Now: e.clock.Now,
		ResendGrace: confGrace, EventPoll: 50 * time.Millisecond,
	}
	return e
}

// paymentClient is a stripe-go client with the given key. stripe-go's own
// retries are off: every retry a case sees is an activity attempt.
func (e *confEnv) paymentClient(key string) *payment.Client {
	e.t.Helper()
	c, err := payment.New(payment.Config{APIKey: key, BaseURL: e.stripeURL, Timeout: 10 * time.Second, MaxNetworkRetries: payment.NoNetworkRetries})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *confEnv) emailClient(key string) *email.Client {
	e.t.Helper()
	c, err := email.New(email.Config{APIKey: key, BaseURL: e.sendgridURL, From: "receipts@example.com", Timeout: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// confExecute runs one activity attempt in its own test environment, as a
// worker would: bg is the worker's background context, whose cancellation
// is the SDK's "worker stopping".
func confExecute[In, Out any](bg context.Context, e *confEnv, fn func(context.Context, In) (Out, error), in In) (Out, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{BackgroundActivityContext: bg})
	env.RegisterActivity(e.acts)
	env.SetTestTimeout(45 * time.Second)
	var out Out
	val, err := env.ExecuteActivity(fn, in)
	if err != nil {
		return out, err
	}
	err = val.Get(&out)
	return out, err
}

// confRetryable reports whether Temporal would retry err.
func confRetryable(err error) bool {
	var appErr *temporal.ApplicationError
	return err != nil && !(errors.As(err, &appErr) && appErr.NonRetryable())
}

// pay records order as paid by message id (1999 usd), with the
// order.placed message in the inbox as the intake leaves it (a refund
// receipt reads the address from there). Safe to repeat.
func (e *confEnv) pay(id string, order int64) {
	e.t.Helper()
	e.payWith(id, order, "pm_card_visa")
}

// payWith is pay with the payment method pm.
func (e *confEnv) payWith(id string, order int64, pm string) {
	e.t.Helper()
	raw := fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":%q}}`, id, order, pm)
	if _, err := e.db.InsertInbox(context.Background(), store.InboxEntry{Consumer: "order-placed", MessageID: id, Payload: raw, PayloadHash: "h-" + id, Source: "test"}); err != nil {
		e.t.Fatal(err)
	}
	in := confChargeInput(id, order)
	in.PaymentMethod = pm
	r, err := confExecute(context.Background(), e, e.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid {
		e.t.Fatalf("pay order %d with %s: %+v, %v", order, id, r, err)
	}
	e.paid.Store(id, r.PaymentIntentID)
}

// stripeObject reads an object from the Stripe simulator as JSON (not
// through the proxy). It may run in a proxy hook, off the test's
// goroutine: a failure is reported and an empty object returned.
func (e *confEnv) stripeObject(path string) map[string]any {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+confStripeKey)
	rec := httptest.NewRecorder()
	e.stripe.ServeHTTP(rec, req)
	obj := map[string]any{}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &obj) != nil {
		e.t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return obj
}

// stripeEvent delivers a signed Stripe event of type typ about obj to the
// webhook handler and returns its event ID.
func (e *confEnv) stripeEvent(typ string, obj any) string {
	id := fmt.Sprintf("evt_conformance_%d", e.seq.Add(1))
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": stripe.APIVersion, "created": time.Now().Unix(),
		"type": typ, "data": map[string]any{"object": obj},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, webhook.StripePath, bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", stripesim.SignatureHeader(body, confStripeHook, time.Now()))
	rec := httptest.NewRecorder()
	e.hooks.ServeHTTP(rec, req)
	if rec.Code/100 != 2 {
		e.t.Errorf("stripe webhook %s answered %d %s", typ, rec.Code, rec.Body.String())
	}
	return id
}

// sendgridEvent delivers one signed SendGrid event to the webhook handler.
func (e *confEnv) sendgridEvent(ev map[string]any) {
	body, err := json.Marshal([]any{ev})
	if err != nil {
		e.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, webhook.SendGridPath, bytes.NewReader(body))
	for k, v := range sendgridsim.SignatureHeaders(body, e.sgKey, time.Now()) {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	e.hooks.ServeHTTP(rec, req)
	if rec.Code/100 != 2 {
		e.t.Errorf("sendgrid webhook answered %d %s", rec.Code, rec.Body.String())
	}
}

// awaitSendGridEvents waits until every event the SendGrid simulator queued
// reached the webhook handler and was answered 2xx.
func (e *confEnv) awaitSendGridEvents() {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.sendgrid.WebhookStats()
		if st.Enqueued > 0 && st.Delivered >= st.Enqueued {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("sendgrid events: %+v after 5s, want all delivered", st)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiesceSendGrid waits for the events the SendGrid simulator queued, if
// any, to be delivered.
func (e *confEnv) quiesceSendGrid() {
	e.t.Helper()
	if e.sendgrid.WebhookStats().Enqueued > 0 {
		e.awaitSendGridEvents()
	}
}

// databaseDown takes the case's database away as its clients see a restart
// of Postgres: new connections are refused and every open one is cut,
// waiting until each backend has exited. databaseUp brings it back; the
// case's cleanup does too.
func (e *confEnv) databaseDown() {
	if !e.down.CompareAndSwap(false, true) {
		return
	}
	e.t.Cleanup(e.databaseUp)
	e.admin(`ALTER DATABASE ` + e.dbIdent() + ` ALLOW_CONNECTIONS false`)
	e.admin(`SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE datname = $1`, e.db.Pool().Config().ConnConfig.Database)
}

func (e *confEnv) databaseUp() {
	if e.down.CompareAndSwap(true, false) {
		e.admin(`ALTER DATABASE ` + e.dbIdent() + ` ALLOW_CONNECTIONS true`)
	}
}

// dbIdent is the case's database name, quoted for SQL.
func (e *confEnv) dbIdent() string {
	return pgx.Identifier{e.db.Pool().Config().ConnConfig.Database}.Sanitize()
}

func (e *confEnv) isDown() bool { return e.down.Load() }

// admin runs one statement on the maintenance database. It may run in a
// proxy hook, off the test's goroutine: a failure is reported, not fatal.
func (e *confEnv) admin(sql string, args ...any) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		e.t.Errorf("admin connection: %v", err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		e.t.Errorf("%s: %v", sql, err)
	}
}

// rows counts the rows of a query with one argument.
func (e *confEnv) rows(query string, arg any) int {
	e.t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), query, arg).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// confSignaler accepts every workflow signal of the webhook handler.
type confSignaler struct{}

func (confSignaler) SignalWorkflow(context.Context, string, string, string, any) error { return nil }

// confClock is time.Now plus an offset that Advance moves: the clock of the
// activities (Activities.Now) and of the Stripe simulator (key expiry).
type confClock struct{ offset atomic.Int64 }

func (c *confClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *confClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// confProxy forwards every request to a simulator, and lets a case step in:
// before answers a request itself instead (it returns true when it did);
// the performed hook fires once, for the first request after which the
// provider's count of the effect grew (the provider accepted the call), and
// is handed the simulator's answer to deliver, lose or hold.
type confProxy struct {
	next http.Handler

	mu        sync.Mutex
	before    func(w http.ResponseWriter, r *http.Request) bool
	count     func() int
	performed func(w http.ResponseWriter, r *http.Request, answer *httptest.ResponseRecorder)
}

// onPerformed arms fn for the request after which count grows.
func (p *confProxy) onPerformed(count func() int, fn func(w http.ResponseWriter, r *http.Request, answer *httptest.ResponseRecorder)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count, p.performed = count, fn
}

// answerBefore arms fn for every request until it is replaced.
func (p *confProxy) answerBefore(fn func(w http.ResponseWriter, r *http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before = fn
}

func (p *confProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	before, count := p.before, p.count
	p.mu.Unlock()
	if before != nil && before(w, r) {
		return
	}
	n := 0
	if count != nil {
		n = count()
	}
	answer := httptest.NewRecorder()
	p.next.ServeHTTP(answer, r)
	if count != nil && count() > n {
		p.mu.Lock()
		fn := p.performed
		p.performed, p.count = nil, nil
		p.mu.Unlock()
		if fn != nil {
			fn(w, r, answer)
			return
		}
	}
	confDeliver(w, answer)
}

// confDeliver copies a recorded answer to w.
func confDeliver(w http.ResponseWriter, answer *httptest.ResponseRecorder) {
	for k, v := range answer.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(answer.Code)
	_, _ = w.Write(answer.Body.Bytes())
}

// confLoseAnswer loses the answer on the way back: the provider performed the
// call and the client never hears how. Half of the body is sent before the
// connection drops: a request that dies before any byte of its answer
// arrived is one Go's transport resends by itself when it carries an
// Idempotency-Key (stripe-go's do), which would hide the loss from the
// activity.
func confLoseAnswer(w http.ResponseWriter, _ *http.Request, answer *httptest.ResponseRecorder) {
	if body := answer.Body.Bytes(); len(body) > 1 {
		for k, v := range answer.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(answer.Code)
		_, _ = w.Write(body[:len(body)/2])
		_ = http.NewResponseController(w).Flush()
	}
	panic(http.ErrAbortHandler)
}

// confReplayed500 answers as Stripe does when it replays a saved 500
// under the request's idempotency key: the outcome is ambiguous, and only
// a lookup can tell what exists.
func confReplayed500(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = w.Write([]byte(`{"error":{"type":"api_error","message":"An unknown error occurred"}}`))
}
