package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/webhook"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// txCounter is a pgx tracer that counts the transactions its connections
// commit, as pg_stat_database.xact_commit counts them: a statement sent
// outside BEGIN … COMMIT is a transaction of its own (autocommit, reads
// included), a batch sent outside one is a single implicit transaction,
// and a COMMIT ends one. It keeps each transaction's first statement for
// the failure messages.
type txCounter struct {
	mu    sync.Mutex
	inTx  map[*pgx.Conn]bool
	txns  []string
	first map[*pgx.Conn]string
}

type (
	sqlKey   struct{}
	batchKey struct{}
)

func (c *txCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	first := ""
	if d.Batch != nil && len(d.Batch.QueuedQueries) > 0 {
		first = d.Batch.QueuedQueries[0].SQL
	}
	return context.WithValue(ctx, batchKey{}, first)
}

func (c *txCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *txCounter) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchEndData) {
	if d.Err != nil {
		return // rolled back
	}
	first, _ := ctx.Value(batchKey{}).(string)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inTx[conn] {
		c.txns = append(c.txns, "batch("+short(strings.Join(strings.Fields(first), " "))+" …)")
	}
}

func newTxCounter() *txCounter {
	return &txCounter{inTx: map[*pgx.Conn]bool{}, first: map[*pgx.Conn]string{}}
}

func (c *txCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (c *txCounter) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil {
		return // rolled back: xact_rollback, not xact_commit
	}
	if _, inBatch := ctx.Value(batchKey{}).(string); inBatch {
		return // the batch's rows: its transaction is counted at its end
	}
	sql, _ := ctx.Value(sqlKey{}).(string)
	stmt := strings.Join(strings.Fields(sql), " ")
	lower := strings.ToLower(stmt)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.HasPrefix(lower, "begin"):
		c.inTx[conn], c.first[conn] = true, ""
	case lower == "commit":
		c.inTx[conn] = false
		c.txns = append(c.txns, "tx("+c.first[conn]+" …)")
	case lower == "rollback":
		c.inTx[conn] = false
	case c.inTx[conn]:
		if c.first[conn] == "" {
			c.first[conn] = short(stmt)
		}
	default:
		c.txns = append(c.txns, short(stmt))
	}
}

func short(stmt string) string {
	if len(stmt) > 90 {
		return stmt[:90] + "…"
	}
	return stmt
}

// take returns the transactions counted since the last take.
func (c *txCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns
	c.txns = nil
	return t
}

// countedFixture is newFixture with a pool whose transactions are counted.
func countedFixture(t *testing.T) (*fixture, *txCounter) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := newTxCounter()
	pc.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sims := testenv.StartSims(t)
	db := store.New(pool)
	return &fixture{
		acts: &activities.Activities{Store: db, Payments: sims.PaymentClient(t), Mailer: sims.EmailClient(t)},
		sims: sims, db: db,
	}, counter
}

// TestEffectsCommitTwiceEach counts the Postgres transactions of a first
// attempt, the common case: a payment commits its claim and its record (the
// PaymentIntent's ID rides in the record: no transaction of its own between
// the create and the confirm), whatever the outcome; a receipt commits its
// claim and its record. This is the path of an input with neither the
// intake's claim nor the receipt's address (an older workflow's); the
// workflow's own path is TestPaidMessageClaimedAtIntake's.
func TestEffectsCommitTwiceEach(t *testing.T) {
	f, counter := countedFixture(t)
	for i, pm := range []string{"pm_card_visa", "pm_card_chargeDeclined", "pm_card_processing"} {
		in := charge("evt_tx_"+pm, int64(80+i), pm)
		counter.take()
		r, err := run(t, f, f.acts.ChargeOrder, in)
		if err != nil || r.Outcome == activities.PaymentBusinessDuplicate || r.Recorded {
			t.Fatalf("%s: charge = %+v, %v", pm, r, err)
		}
		if txns := counter.take(); len(txns) != 2 {
			t.Errorf("%s (%s): %d transactions, want 2 (the claim, the record):\n  %s", pm, r.Outcome, len(txns), strings.Join(txns, "\n  "))
		}
		if p := paymentOf(t, f, in.MessageID); r.PaymentIntentID != "" && p.PaymentIntentID != r.PaymentIntentID {
			t.Errorf("%s: payment %+v does not record the PaymentIntent %q", pm, p, r.PaymentIntentID)
		}
		counter.take()
	}
	if st := f.sims.Stripe.Stats(); st.RequestsByOperation["search"] != 0 || st.RequestsByOperation["list"] != 0 {
		t.Errorf("stripe requests %v: a first attempt looked anything up", st.RequestsByOperation)
	}

	counter.take()
	rec := activities.ReceiptInput{Consumer: "order-placed", MessageID: "evt_tx_pm_card_visa", OrderID: 80, Amount: 1999, Currency: "usd", To: "ada@example.com", PaymentIntentID: "pi_x"}
	if r, err := run(t, f, f.acts.SendReceipt, rec); err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("receipt = %+v, %v", r, err)
	}
	if txns := counter.take(); len(txns) != 2 {
		t.Errorf("receipt: %d transactions, want 2 (the claim, the record):\n  %s", len(txns), strings.Join(txns, "\n  "))
	}
}

// TestPaidMessageCommitsThrice counts the Postgres transactions of a paid
// order's effects when the local charge carries the receipt's address, as
// the workflow's does: the payment's claim; its record, which claims the
// receipt (claim 1) in the same statement; the receipt's record. SendReceipt
// then returns the charge's outcome with none. This is the path of a
// message the intake did not claim (started by the dispatcher or a copy);
// any transaction more fails here.
func TestPaidMessageCommitsThrice(t *testing.T) {
	f, counter := countedFixture(t)
	in := withReceipt(charge("evt_tx_three", 95, "pm_card_visa"))
	counter.take()
	r := chargeAndReceipt(t, f, counter, in, 3, "the claim, the record with the receipt's claim, the receipt's record")
	e, err := f.db.Effect(context.Background(), "email:"+in.MessageID)
	if err != nil || e.State != store.StateSucceeded || e.Claim != 1 || e.ProviderRef != r.Receipt.ProviderMessageID {
		t.Errorf("receipt's ledger row = %+v, %v; want succeeded under claim 1 with %s", e, err, r.Receipt.ProviderMessageID)
	}
	if st, err := f.db.Status(context.Background(), in.Consumer, in.MessageID); err != nil || st.Order == nil || st.Order.ReceiptStatus != "sent" {
		t.Errorf("order = %+v, %v; want its receipt sent", st.Order, err)
	}
}

// chargeAndReceipt runs in's local charge, which must send the receipt,
// then SendReceiptLocally as the workflow runs it after such a charge: the
// charge must commit want transactions (why names them), SendReceipt none,
// and SendGrid must hold one receipt.
func chargeAndReceipt(t *testing.T, f *fixture, counter *txCounter, in activities.ChargeInput, want int, why string) activities.ChargeResult {
	t.Helper()
	r := chargeLocally(t, f, in)
	if r.Outcome != activities.PaymentPaid || r.Receipt == nil || r.Receipt.Outcome != activities.ReceiptSent {
		t.Fatalf("charge = %+v (receipt %+v); want paid with its receipt sent", r, r.Receipt)
	}
	if txns := counter.take(); len(txns) != want {
		t.Errorf("charge and receipt: %d transactions, want %d (%s):\n  %s", len(txns), want, why, strings.Join(txns, "\n  "))
	}
	rec := activities.ReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: in.Currency,
		To: in.ReceiptTo, PaymentIntentID: r.PaymentIntentID, Sent: r.Receipt}
	if lr, err := run(t, f, f.acts.SendReceiptLocally, rec); err != nil || lr.Err != nil || lr.Result != *r.Receipt {
		t.Fatalf("receipt = %+v, %v; want the charge's %+v", lr, err, *r.Receipt)
	}
	if txns := counter.take(); len(txns) != 0 {
		t.Errorf("SendReceipt after the charge sent it: %d transactions, want 0:\n  %s", len(txns), strings.Join(txns, "\n  "))
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:"+in.MessageID]; n != 1 {
		t.Errorf("receipts at sendgrid = %d, want 1", n)
	}
	return r
}

// TestChargeOrderWebhookBeforeTheRecord: Stripe's payment_intent.succeeded
// reaches the webhook between the confirmation and the activity's record,
// while Postgres has no PaymentIntent ID yet (it is recorded with the
// outcome). The event finds the payment by its PaymentIntent's
// metadata[message_id] and settles it; the activity's record then finds the
// same outcome recorded. One charge, one processed row, one order.paid.
func TestChargeOrderWebhookBeforeTheRecord(t *testing.T) {
	f := newFixture(t, "")
	const secret = "whsec_before_record"
	sig := &nopSignaler{}
	h, err := webhook.New(f.db, sig, nil, webhook.Config{StripeSecrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	in := charge("evt_wh_first", 90, "pm_card_visa")
	var hooked, idBefore string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/confirm") || hooked != "" {
			f.sims.Stripe.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		f.sims.Stripe.ServeHTTP(rec, r)
		if p, err := f.db.PaymentOf(r.Context(), in.Consumer, in.MessageID); err == nil {
			idBefore = p.PaymentIntentID
		}
		var pi map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &pi); err != nil {
			t.Errorf("confirm answer: %v", err)
		}
		body, _ := json.Marshal(map[string]any{
			"id": "evt_pi_succeeded_1", "object": "event", "api_version": stripe.APIVersion, "created": time.Now().Unix(),
			"type": "payment_intent.succeeded", "data": map[string]any{"object": pi},
		})
		req := httptest.NewRequest(http.MethodPost, webhook.StripePath, bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", stripesim.SignatureHeader(body, secret, time.Now()))
		hw := httptest.NewRecorder()
		h.ServeHTTP(hw, req)
		resp, _ := io.ReadAll(hw.Result().Body)
		hooked = hw.Result().Status + " " + string(resp)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	pay, err := payment.New(payment.Config{APIKey: "sk_test_webhook_first", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f.acts.Payments = pay

	r, err := run(t, f, f.acts.ChargeOrder, in)
	if err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge = %+v, %v; want paid", r, err)
	}
	if !strings.HasPrefix(hooked, "200") {
		t.Fatalf("webhook answered %q, want 200", hooked)
	}
	if idBefore != "" {
		t.Errorf("the PaymentIntent ID %s was recorded before the confirmation: a transaction of its own", idBefore)
	}
	p := paymentOf(t, f, in.MessageID)
	if p.State != store.PaymentSucceeded || p.PaymentIntentID != r.PaymentIntentID {
		t.Fatalf("payment = %+v; want succeeded with %s", p, r.PaymentIntentID)
	}
	var settledBy string
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT coalesce(result->>'settled_by', '') FROM effects WHERE key = $1`, "payment:"+in.MessageID).Scan(&settledBy); err != nil || settledBy != "evt_pi_succeeded_1" {
		t.Errorf("ledger row settled by %q, %v; want the webhook's event (it came first)", settledBy, err)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM processed_messages WHERE message_id = $1`:         1,
		`SELECT count(*) FROM outbox WHERE event_id = 'order.paid:' || $1`:      1,
		`SELECT count(*) FROM orders WHERE message_id = $1 AND status = 'paid'`: 1,
	} {
		var n int
		if err := f.db.Pool().QueryRow(context.Background(), q, in.MessageID).Scan(&n); err != nil || n != want {
			t.Errorf("%s = %d, %v; want %d", q, n, err, want)
		}
	}
	if n := f.sims.Stripe.Stats().ChargesByMessage[in.MessageID]; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if len(sig.sent) != 1 {
		t.Errorf("%d signals, want 1 (the settled payment)", len(sig.sent))
	}
}

type nopSignaler struct{ sent []string }

func (s *nopSignaler) SignalWorkflow(_ context.Context, workflowID, _, _ string, _ any) error {
	s.sent = append(s.sent, workflowID)
	return nil
}

// TestRefundedMessageCommitsThrice counts the Postgres transactions of a
// refund whose local attempt sends its receipt, as the workflow's does:
// the refund's claim, which reads the receipt's address with the payment;
// the refund's record, which claims the receipt (claim 1) in the same
// statement; the receipt's record. Three, where the refund and a receipt
// of its own took four and a read of the address. SendRefundReceipt then
// returns the refund's outcome with none.
func TestRefundedMessageCommitsThrice(t *testing.T) {
	f, counter := countedFixture(t)
	paid(t, f, "evt_tx_rp", 96)
	in := withRefundReceipt(refundOf("evt_tx_rr", 96, 700))
	counter.take()
	r := refundLocally(t, f, in)
	if r.Outcome != activities.RefundRefunded || r.Receipt == nil || r.Receipt.Outcome != activities.ReceiptSent {
		t.Fatalf("refund = %+v; want refunded with its receipt sent", r)
	}
	if txns := counter.take(); len(txns) != 3 {
		t.Errorf("refund and receipt: %d transactions, want 3 (the claim, the record with the receipt's claim, the receipt's record):\n  %s",
			len(txns), strings.Join(txns, "\n  "))
	}
	rin := activities.RefundReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount, Currency: "usd", RefundID: r.RefundID, Sent: r.Receipt}
	if m, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || m != *r.Receipt {
		t.Fatalf("SendRefundReceipt with Sent = %+v, %v", m, err)
	}
	if txns := counter.take(); len(txns) != 0 {
		t.Errorf("SendRefundReceipt after the refund sent it: %d transactions, want 0:\n  %s", len(txns), strings.Join(txns, "\n  "))
	}
}
