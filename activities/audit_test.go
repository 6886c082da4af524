package activities_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
)

// The audit against the simulators: each finding kind is made to happen
// for real (the product charges, refunds and mails through the
// simulators, then a record is lost, a charge made outside effectively, an
// amount changed, …), the audit reports it exactly once, and a rerun adds
// nothing.

// auditEnv is a conformance world with an Auditor over it.
type auditEnv struct {
	*confEnv
	auditor *audit.Auditor
	from    time.Time
}

func newAuditEnv(t *testing.T, cfg audit.Config) *auditEnv {
	t.Helper()
	e := newConfEnv(t)
	cfg.Now = e.clock.Now
	a, err := audit.New(e.db, e.paymentClient(confStripeKey), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &auditEnv{confEnv: e, auditor: a, from: time.Now().Add(-time.Minute)}
}

// window audits from the env's start until a minute from now.
func (e *auditEnv) window() audit.Report {
	e.t.Helper()
	rep, err := e.auditor.Window(context.Background(), e.from, time.Now().Add(time.Minute))
	if err != nil {
		e.t.Fatalf("audit: %v (report %+v)", err, rep)
	}
	return rep
}

// exec runs SQL the way a bug or an operator would.
func (e *auditEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Pool().Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// receipt sends message id's receipt through SendReceipt.
func (e *auditEnv) receipt(id string, order int64) {
	e.t.Helper()
	r, err := confExecute(context.Background(), e.confEnv, e.acts.SendReceipt, confReceiptInput(e.confEnv, confMsg{ID: id, Order: order}))
	if err != nil || r.Outcome != activities.ReceiptSent {
		e.t.Fatalf("receipt of %s: %+v, %v", id, r, err)
	}
}

// outsideStripe is a Stripe client used the way a person in the dashboard,
// or another program with the same key, would: keys of its own.
func (e *auditEnv) outsideStripe() *payment.Client { return e.paymentClient(confStripeKey) }

// wantOnly checks that rep found exactly one finding, of kind, about
// object, and that it is kept once in audit_findings; then that a rerun
// finds it again without adding anything.
func (e *auditEnv) wantOnly(rep audit.Report, kind store.FindingKind, object string) {
	e.t.Helper()
	if rep.Found != 1 || rep.New != 1 || len(rep.Findings) != 1 {
		e.t.Fatalf("findings %+v (found %d, new %d), want exactly one %s of %s", rep.Findings, rep.Found, rep.New, kind, object)
	}
	f := rep.Findings[0]
	if f.Kind != kind || f.Object != object || f.Detail == "" {
		e.t.Fatalf("finding %+v, want %s of %s with a detail", f, kind, object)
	}
	again := e.window()
	if again.Found != 1 || again.New != 0 || again.Findings[0].Kind != kind || again.Findings[0].Object != object {
		e.t.Errorf("rerun: found %d, new %d (%+v); want the same finding, nothing new", again.Found, again.New, again.Findings)
	}
	if n := e.rows(`SELECT count(*) FROM audit_findings WHERE kind = $1`, string(kind)); n != 1 {
		e.t.Errorf("audit_findings holds %d rows of %s, want 1", n, kind)
	}
	if n := e.rows(`SELECT count(*) FROM audit_findings WHERE kind <> $1`, string(kind)); n != 0 {
		e.t.Errorf("audit_findings holds %d rows of other kinds, want 0", n)
	}
	open, err := e.db.OpenFindings(context.Background())
	if err != nil || open[string(kind)] != 1 {
		e.t.Errorf("open findings %v, %v; want 1 of %s (the metric reads it)", open, err, kind)
	}
}

// TestAuditOfACleanLedgerFindsNothing: charges, a refund through the
// product, receipts with their SendGrid events: nothing to report.
func TestAuditOfACleanLedgerFindsNothing(t *testing.T) {
	e := newAuditEnv(t, audit.Config{Receipts: true, EventBound: time.Millisecond})
	for i := int64(1); i <= 3; i++ {
		id := fmt.Sprintf("evt_clean_%d", i)
		e.pay(id, i)
		e.receipt(id, i)
	}
	e.pay("evt_clean_refunded", 10)
	if r, err := confExecute(context.Background(), e.confEnv, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_clean_refund", Order: 10, Amount: 500})); err != nil {
		t.Fatalf("refund: %+v, %v", r, err)
	}
	// A declined charge is recorded failed: no money, no record of money.
	if r, err := confExecute(context.Background(), e.confEnv, e.acts.ChargeOrder, activities.ChargeInput{
		Consumer: "order-placed", MessageID: "evt_clean_declined", OrderID: 20, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_chargeDeclined",
	}); err != nil || r.Outcome != activities.PaymentFailed {
		t.Fatalf("declined charge: %+v, %v; want payment_failed", r, err)
	}
	e.awaitSendGridEvents()
	time.Sleep(5 * time.Millisecond) // past the event bound
	rep := e.window()
	if rep.Found != 0 || !rep.Complete || rep.Listed != 5 {
		t.Fatalf("clean ledger: %+v, findings %+v; want none, complete, 5 payment intents listed", rep, rep.Findings)
	}
	if rep.Requests < 3 {
		t.Errorf("requests %d: want at least the intents list, the refunds list and the refunded intent's refunds", rep.Requests)
	}
}

// TestAuditMoneyWithoutRecord: the payment's record is deleted after the
// charge.
func TestAuditMoneyWithoutRecord(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	e.pay("evt_lost", 1)
	p, err := e.db.PaymentOf(context.Background(), "order-placed", "evt_lost")
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`DELETE FROM payments WHERE message_id = $1`, "evt_lost")
	e.wantOnly(e.window(), store.FindingMoneyWithoutRecord, p.PaymentIntentID)
}

// TestAuditChargeOutsideEffectively: someone charges with a message's
// metadata outside effectively: for a message effectively charged, a
// duplicate charge; for one it never saw, money without a record.
func TestAuditChargeOutsideEffectively(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) {
		e := newAuditEnv(t, audit.Config{})
		e.pay("evt_twice", 2)
		if _, err := e.outsideStripe().Charge(context.Background(), payment.ChargeRequest{
			IdempotencyKey: "dashboard-1", MessageID: "evt_twice", OrderID: 2, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
		}); err != nil {
			t.Fatal(err)
		}
		e.wantOnly(e.window(), store.FindingDuplicateCharge, "message:evt_twice")
	})
	t.Run("unknown message", func(t *testing.T) {
		e := newAuditEnv(t, audit.Config{})
		ch, err := e.outsideStripe().Charge(context.Background(), payment.ChargeRequest{
			IdempotencyKey: "dashboard-2", MessageID: "evt_never_seen", OrderID: 77, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
		})
		if err != nil {
			t.Fatal(err)
		}
		e.wantOnly(e.window(), store.FindingMoneyWithoutRecord, ch.PaymentIntentID)
	})
}

// TestAuditAmountMismatch: the ledger's amount is changed after the
// charge.
func TestAuditAmountMismatch(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	e.pay("evt_amount", 3)
	p, err := e.db.PaymentOf(context.Background(), "order-placed", "evt_amount")
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE payments SET amount = 2999 WHERE message_id = $1`, "evt_amount")
	e.wantOnly(e.window(), store.FindingAmountMismatch, p.PaymentIntentID)
}

// TestAuditRecordWithoutMoney: a bug settles a declined payment as
// succeeded; and one names a PaymentIntent that does not exist.
func TestAuditRecordWithoutMoney(t *testing.T) {
	t.Run("declined recorded succeeded", func(t *testing.T) {
		e := newAuditEnv(t, audit.Config{})
		if r, err := confExecute(context.Background(), e.confEnv, e.acts.ChargeOrder, activities.ChargeInput{
			Consumer: "order-placed", MessageID: "evt_declined", OrderID: 4, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_chargeDeclined",
		}); err != nil || r.Outcome != activities.PaymentFailed {
			t.Fatalf("declined charge: %+v, %v; want payment_failed", r, err)
		}
		e.exec(`UPDATE payments SET state = 'succeeded' WHERE message_id = $1`, "evt_declined")
		key, _ := identity.Key(identity.EffectPayment, "evt_declined")
		e.wantOnly(e.window(), store.FindingRecordWithoutMoney, key)
	})
	t.Run("no such payment intent", func(t *testing.T) {
		e := newAuditEnv(t, audit.Config{})
		// Charged outside the window the audit lists; the ledger's row is
		// in it and names a PaymentIntent Stripe does not have.
		e.pay("evt_ghost", 5)
		e.exec(`UPDATE payments SET payment_intent_id = 'pi_does_not_exist' WHERE message_id = $1`, "evt_ghost")
		e.exec(`UPDATE payments SET created_at = now() + interval '2 minutes' WHERE message_id = $1`, "evt_ghost")
		from := time.Now().Add(90 * time.Second)
		rep, err := e.auditor.Window(context.Background(), from, from.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		key, _ := identity.Key(identity.EffectPayment, "evt_ghost")
		if rep.Found != 1 || rep.Findings[0].Kind != store.FindingRecordWithoutMoney || rep.Findings[0].Object != key {
			t.Fatalf("findings %+v, want one record_without_money of %s", rep.Findings, key)
		}
	})
}

// TestAuditRefundMismatch: a refund is made at Stripe outside effectively.
func TestAuditRefundMismatch(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	e.pay("evt_refunded_outside", 6)
	p, err := e.db.PaymentOf(context.Background(), "order-placed", "evt_refunded_outside")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.outsideStripe().Refund(context.Background(), payment.RefundRequest{
		IdempotencyKey: "dashboard-refund", MessageID: "support-ticket-9", PaymentIntentID: p.PaymentIntentID, Amount: 700,
	}); err != nil {
		t.Fatal(err)
	}
	e.wantOnly(e.window(), store.FindingRefundMismatch, p.PaymentIntentID)
}

// TestAuditReceiptWithoutEvent: SendGrid's events for a receipt never
// arrive (the webhook is down).
func TestAuditReceiptWithoutEvent(t *testing.T) {
	e := newAuditEnv(t, audit.Config{Receipts: true, EventBound: 10 * time.Millisecond})
	e.pay("evt_silent", 7)
	e.sendgrid.StopWebhooks()
	e.receipt("evt_silent", 7)
	time.Sleep(20 * time.Millisecond)
	key, _ := identity.Key(identity.EffectEmail, "evt_silent")
	e.wantOnly(e.window(), store.FindingReceiptWithoutEvent, key)
}

// TestAuditEventWithoutReceipt: a mail is sent outside effectively under
// a key of ours; SendGrid reports it.
func TestAuditEventWithoutReceipt(t *testing.T) {
	e := newAuditEnv(t, audit.Config{Receipts: true})
	c, err := email.New(email.Config{APIKey: confSendGridKey, BaseURL: e.sendgridURL, From: "receipts@example.com", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), email.Mail{IdempotencyKey: "email:evt_by_hand", MessageID: "evt_by_hand",
		To: "ada@example.com", Subject: "Your receipt", Text: "sent by hand"}); err != nil {
		t.Fatal(err)
	}
	e.awaitSendGridEvents()
	e.wantOnly(e.window(), store.FindingEventWithoutReceipt, "email:evt_by_hand")
}

// TestAuditStopsAtItsBudgetAndResumes: a run that spends its Stripe
// request budget stops, keeps its checkpoint, and the next run goes on;
// a slice too large for a whole run's budget is halved.
func TestAuditStopsAtItsBudgetAndResumes(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	e.pay("evt_budget", 8)
	e.exec(`DELETE FROM payments WHERE message_id = $1`, "evt_budget")
	ctx := context.Background()
	// Two requests per slice (intents, refunds); a budget of one stops the
	// first slice, and the slice is halved for the next run.
	tight, err := audit.New(e.db, e.paymentClient(confStripeKey), audit.Config{
		MaxRequests: 1, Slice: 2 * time.Hour, Lag: time.Second, Lookback: 4 * time.Hour, Now: func() time.Time { return time.Now().Add(time.Minute) },
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tight.Resume(ctx, "test")
	if !errors.Is(err, audit.ErrBudget) || rep.Complete || rep.Requests != 1 {
		t.Fatalf("tight run: %+v, %v; want ErrBudget after 1 request", rep, err)
	}
	cp, ok, err := e.db.AuditCheckpointOf(ctx, "test")
	if err != nil || !ok || cp.Slice != time.Hour {
		t.Fatalf("checkpoint %+v %v %v: want the slice halved to 1h", cp, ok, err)
	}
	roomy, err := audit.New(e.db, e.paymentClient(confStripeKey), audit.Config{
		MaxRequests: 5, Slice: 2 * time.Hour, Lag: time.Second, Lookback: 4 * time.Hour, Now: func() time.Time { return time.Now().Add(time.Minute) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// 5 requests: two slices of an hour, then the budget is spent in the
	// third; the checkpoint moves two hours.
	rep, err = roomy.Resume(ctx, "test")
	if !errors.Is(err, audit.ErrBudget) || rep.Requests != 5 {
		t.Fatalf("second run: %+v, %v; want ErrBudget after 5 requests", rep, err)
	}
	cp2, _, _ := e.db.AuditCheckpointOf(ctx, "test")
	if got := cp2.AuditedUntil.Sub(cp.AuditedUntil); got != 2*time.Hour {
		t.Fatalf("checkpoint moved %s, want 2h", got)
	}
	for try := 0; !rep.Complete && try < 5; try++ {
		rep, err = roomy.Resume(ctx, "test")
		if err != nil && !errors.Is(err, audit.ErrBudget) {
			t.Fatal(err)
		}
		if rep.Found > 0 {
			break
		}
	}
	n := e.rows(`SELECT count(*) FROM audit_findings WHERE kind = $1`, string(store.FindingMoneyWithoutRecord))
	if n != 1 {
		t.Fatalf("after the resumed runs: %d money_without_record findings, want 1", n)
	}
}

// TestAuditCost measures what an audit costs in Stripe requests: over n
// messages of which every tenth was refunded, one list request per 100
// PaymentIntents, one per 100 refunds, and one list of each refunded
// PaymentIntent's refunds; nothing else (no retrieve, no search). It logs
// the figure per 10,000 messages that docs/operations.md gives.
func TestAuditCost(t *testing.T) {
	const n, refunded = 250, 25
	e := newAuditEnv(t, audit.Config{Slice: 24 * time.Hour})
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("evt_cost_%d", i)
		e.pay(id, int64(1000+i))
		if i%(n/refunded) == 0 {
			if r, err := confExecute(ctx, e.confEnv, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_cost_refund_" + id, Order: int64(1000 + i), Amount: 100})); err != nil {
				t.Fatalf("refund: %+v, %v", r, err)
			}
		}
	}
	before := e.stripe.Stats().RequestsByOperation
	rep := e.window()
	after := e.stripe.Stats().RequestsByOperation
	ops := map[string]int{}
	total := 0
	for op, k := range after {
		if d := k - before[op]; d > 0 {
			ops[op], total = d, total+d
		}
	}
	want := (n+99)/100 + (refunded+99)/100 + refunded
	if rep.Found != 0 || rep.Listed != n || total != rep.Requests || total != want || ops["list"] != (n+99)/100 || ops["retrieve"] != 0 || ops["search"] != 0 {
		t.Fatalf("audit of %d messages (%d refunded): report %+v, requests at Stripe %v (%d); want %d, counted by the report, lists only", n, refunded, rep, ops, total, want)
	}
	t.Logf("audit of %d messages, %d refunded: %d Stripe requests %v = %.0f per 10,000 messages (10%% refunded); %d per 10,000 without refunds",
		n, refunded, total, ops, float64(total)*10000/n, 10000/100)
}

// scheduledAudits is the hourly schedule of `name`, run at each of ats (a
// clock of its own: what it passes is what Resume would by then).
func (e *auditEnv) scheduledAudits(cfg audit.Config, name string, ats ...time.Time) {
	e.t.Helper()
	for _, at := range ats {
		cfg.Now = func() time.Time { return at }
		cfg.Lookback = time.Hour
		a, err := audit.New(e.db, e.paymentClient(confStripeKey), cfg)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := a.Resume(context.Background(), name); err != nil {
			e.t.Fatalf("audit at %s: %v", at, err)
		}
	}
}

// TestScheduledAuditComparesAReceiptSentAfterItsSlice: a receipt whose
// first send met SendGrid's 500 is still claimed when the scheduled audit
// passes the slice it was claimed in; its retry sends it later, and
// SendGrid never reports it. The run covering the send reports
// receipt_without_event (before, no run ever compared it).
func TestScheduledAuditComparesAReceiptSentAfterItsSlice(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	ctx := context.Background()
	const id = "evt_late_receipt"
	e.pay(id, 1)
	e.sendgrid.StopWebhooks()
	e.sendgrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: id}, Kind: sendgridsim.FaultErrorBefore, Status: 500, Times: 1})
	if r, err := confExecute(ctx, e.confEnv, e.acts.SendReceipt, confReceiptInput(e.confEnv, confMsg{ID: id, Order: 1})); err == nil {
		t.Fatalf("first send: %+v, want SendGrid's 500", r)
	}
	start := time.Now()
	cfg := audit.Config{Receipts: true}
	e.scheduledAudits(cfg, "late-receipt", start.Add(20*time.Minute)) // the receipt is still claimed
	// The retry, half an hour later on the schedule's clock.
	e.receipt(id, 1)
	e.exec(`UPDATE effects SET updated_at = $2 WHERE key = $1`, identity.MustKey(identity.EffectEmail, id), start.Add(30*time.Minute))
	e.scheduledAudits(cfg, "late-receipt", start.Add(80*time.Minute), start.Add(140*time.Minute))
	if n := e.rows(`SELECT count(*) FROM audit_findings WHERE kind = 'receipt_without_event' AND object = $1`,
		identity.MustKey(identity.EffectEmail, id)); n != 1 {
		t.Fatalf("receipt_without_event findings = %d, want 1: the schedule never compared the receipt sent after its slice", n)
	}
}

// TestScheduledAuditComparesAPaymentSettledAfterItsSlice: a payment is
// still processing when the scheduled audit passes its slice; it settles
// later, and the ledger's amount differs from the charge (made here as
// TestAuditAmountMismatch makes it). The run covering the settlement
// reports amount_mismatch.
func TestScheduledAuditComparesAPaymentSettledAfterItsSlice(t *testing.T) {
	e := newAuditEnv(t, audit.Config{})
	ctx := context.Background()
	const id = "evt_processing"
	r, err := confExecute(ctx, e.confEnv, e.acts.ChargeOrder, activities.ChargeInput{
		Consumer: "order-placed", MessageID: id, OrderID: 9, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_processing",
	})
	if err != nil || r.Outcome != activities.PaymentProcessing {
		t.Fatalf("charge: %+v, %v; want processing", r, err)
	}
	start := time.Now()
	e.scheduledAudits(audit.Config{}, "late-payment", start.Add(20*time.Minute))
	if err := e.stripe.SettleProcessing(r.PaymentIntentID, true); err != nil {
		t.Fatal(err)
	}
	if s, err := confExecute(ctx, e.confEnv, e.acts.SettlePayment, activities.SettleInput{Consumer: "order-placed", MessageID: id, OrderID: 9}); err != nil || s.Outcome != activities.PaymentPaid {
		t.Fatalf("settle: %+v, %v", s, err)
	}
	e.exec(`UPDATE payments SET amount = 2999, updated_at = $2 WHERE message_id = $1`, id, start.Add(30*time.Minute))
	e.scheduledAudits(audit.Config{}, "late-payment", start.Add(80*time.Minute), start.Add(140*time.Minute))
	if n := e.rows(`SELECT count(*) FROM audit_findings WHERE kind = $1`, string(store.FindingAmountMismatch)); n != 1 {
		t.Fatalf("amount_mismatch findings = %d, want 1: the schedule never compared the payment settled after its slice", n)
	}
}
