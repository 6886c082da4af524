package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/stripesim"
)

// The effect kinds of the conformance suite, one adapter each. Adding
// an effect kind means adding an adapter here and to confKinds: every
// case of conformance_test.go then runs against it.

// confMsg is the message a case feeds an effect.
type confMsg struct {
	ID    string
	Order int64
	// Amount is what a refund asks for (the payment is 1999 usd).
	Amount int64
	// PaymentID is the order.placed message that paid the order a refund
	// refers to.
	PaymentID string
	// RefundID names the refund a refund receipt tells about.
	RefundID string
}

// confRow is an effect's record in Postgres, as the case compares it.
type confRow struct {
	// State is the record's state: succeeded, failed, claimed, unexpected,
	// … ("" when there is none).
	State string
	// Ref is the provider's object the record names (PaymentIntent,
	// Refund, X-Message-Id).
	Ref string
	// Detail is anything else worth printing.
	Detail string
}

// same compares the record's state and provider object, not its detail
// (an order's receipt status moves with SendGrid's delivery events).
func (r confRow) same(o confRow) bool { return r.State == o.State && r.Ref == o.Ref }

func (r confRow) String() string { return fmt.Sprintf("%s %s %s", r.State, r.Ref, r.Detail) }

// confEffect describes one effect to the suite.
type confEffect struct {
	name     string
	consumer string
	// success is the outcome of the effect performed once and recorded.
	success string
	// message is the message a case uses; prepare makes what it needs
	// exist first (a paid order, the order's inbox row). prepare must be
	// safe to repeat.
	message func(id string) confMsg
	prepare func(e *confEnv, m confMsg)
	// call runs one activity attempt; bg is the worker's background context
	// and the outcome is the result's Outcome.
	call func(bg context.Context, e *confEnv, m confMsg) (string, error)
	// performed is how many times the provider performed the effect for m
	// (from the simulator), requests how many API requests the provider
	// received in all.
	performed func(e *confEnv, m confMsg) int
	requests  func(e *confEnv) int
	// ledger is the effect's record of m.
	ledger func(e *confEnv, m confMsg) confRow
	// proxy is the hookable proxy in front of the provider.
	proxy func(e *confEnv) *confProxy
	// fault arms a simulator fault on every request for m; clearFaults
	// removes it.
	fault       func(e *confEnv, m confMsg, kind simfault.Kind, status int)
	clearFaults func(e *confEnv)
	// revokeKey makes the client use a key the provider refuses (401);
	// restoreKey puts the good one back.
	revokeKey, restoreKey func(e *confEnv)
	// expireKey lets the provider's key window (or the receipt's grace)
	// pass after an attempt whose answer was lost.
	expireKey func(e *confEnv, m confMsg)
	// webhookBeforeRecord delivers the provider's event about the effect
	// just performed (answer is the provider's answer), before the
	// activity hears of it.
	webhookBeforeRecord func(e *confEnv, m confMsg, answer *httptest.ResponseRecorder)
	// contradict delivers an event that contradicts the recorded effect;
	// contradictionKept checks that it was kept, not lost.
	contradict        func(e *confEnv, m confMsg)
	contradictionKept func(e *confEnv, m confMsg)
	// decoy makes the provider hold an object naming m with another amount
	// and returns the path of the POST whose answer is then made ambiguous
	// (a replayed 500), so that the activity must look the effect up.
	// afterDecoy, when set, runs once the activity has seen the decoy (the
	// decoy's own webhook).
	decoy      func(e *confEnv, m confMsg) string
	afterDecoy func(e *confEnv, m confMsg)
	// second is another message for m's business key, the number of
	// effects it may cause, and the outcome it must have when that is 0.
	second func(m confMsg) (m2 confMsg, effects int, outcome string)
	// twin is the kind of the other consumer whose message may share m's
	// ID; twinFirst runs the twin before this kind.
	twin      string
	twinFirst bool
	// done is the ledger's state of the effect performed and recorded;
	// "" is succeeded.
	done string
	// notApplicable names the cases that do not apply to this kind, with
	// the reason the suite prints.
	notApplicable map[string]string
}

func confKinds() []*confEffect {
	return []*confEffect{confChargeKind(), confRefundKind(), confReceiptKind(), confRefundReceiptKind(), confHeldReceiptKind(), confHeldRefundReceiptKind(), confIntakeRefundKind(), confPendingRefundKind()}
}

func confChargeInput(id string, order int64) activities.ChargeInput {
	return activities.ChargeInput{Consumer: "order-placed", MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa"}
}

// Shared by the kinds whose provider is Stripe.
func confStripeProxy(e *confEnv) *confProxy { return e.stripeProxy }
func confStripeRequests(e *confEnv) int     { return e.stripe.Stats().Requests }
func confStripeFault(e *confEnv, m confMsg, kind simfault.Kind, status int) {
	e.stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: m.ID}, Kind: kind, Status: status})
}
func confStripeClear(e *confEnv)   { e.stripe.ClearFaults() }
func confStripeRevoke(e *confEnv)  { e.acts.Payments = e.paymentClient("sk_live_revoked0000") }
func confStripeRestore(e *confEnv) { e.acts.Payments = e.paymentClient(confStripeKey) }
func confStripeExpire(e *confEnv, _ confMsg) {
	// Stripe keeps keys 24 h: one more hour and the simulator has forgotten
	// them; the activities' clock moves with it.
	e.clock.Advance(25 * time.Hour)
}

// confStripeEventKept: the contradicting event is in the inbox.
func confStripeEventKept(e *confEnv, _ confMsg) {
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'stripe-events' AND message_id = $1`, fmt.Sprintf("evt_conformance_%d", e.seq.Load())); n != 1 {
		e.t.Errorf("the contradicting stripe event is not in the inbox (%d rows)", n)
	}
}

func confChargeKind() *confEffect {
	k := &confEffect{
		name: "charge", consumer: "order-placed", success: string(activities.PaymentPaid),
		message: func(id string) confMsg { return confMsg{ID: id, Order: 42} },
		prepare: func(*confEnv, confMsg) {},
		call: func(bg context.Context, e *confEnv, m confMsg) (string, error) {
			r, err := confExecute(bg, e, e.acts.ChargeOrder, confChargeInput(m.ID, m.Order))
			return string(r.Outcome), err
		},
		performed: func(e *confEnv, m confMsg) int { return e.stripe.Stats().ChargesByMessage[m.ID] },
		requests:  confStripeRequests,
		ledger:    confChargeLedger,
		proxy:     confStripeProxy, fault: confStripeFault, clearFaults: confStripeClear,
		revokeKey: confStripeRevoke, restoreKey: confStripeRestore, expireKey: confStripeExpire,
		webhookBeforeRecord: func(e *confEnv, _ confMsg, answer *httptest.ResponseRecorder) {
			// The answer to the call that charged is the PaymentIntent.
			var pi map[string]any
			if err := confJSON(answer, &pi); err != nil || pi["status"] != "succeeded" {
				e.t.Errorf("the charging answer is not a succeeded PaymentIntent: %v %s", err, answer.Body.String())
				return
			}
			e.stripeEvent(stripesim.EventIntentSucceeded, pi)
		},
		contradict: func(e *confEnv, m confMsg) {
			row := confChargeLedger(e, m)
			pi := e.stripeObject("/v1/payment_intents/" + row.Ref)
			pi["status"] = "requires_payment_method"
			pi["last_payment_error"] = map[string]any{"code": "card_declined", "decline_code": "generic_decline", "message": "Your card was declined."}
			e.stripeEvent(stripesim.EventIntentFailed, pi)
		},
		contradictionKept: func(e *confEnv, m confMsg) {
			confStripeEventKept(e, m)
			if n := e.rows(`SELECT count(*) FROM payment_anomalies WHERE message_id = $1`, m.ID); n != 1 {
				e.t.Errorf("payment_anomalies has %d rows for %s, want 1: the contradiction is not kept for an operator", n, m.ID)
			}
		},
		decoy: func(e *confEnv, m confMsg) string {
			// A succeeded PaymentIntent naming the message, of 2999 instead
			// of 1999.
			pi, err := e.acts.Payments.Charge(context.Background(), payment.ChargeRequest{
				IdempotencyKey: "decoy:" + m.ID, MessageID: m.ID, OrderID: m.Order, Amount: 2999, Currency: "usd", PaymentMethod: "pm_card_visa",
			})
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Logf("at stripe: PaymentIntent %s (%s) of 2999 usd naming %s; the message asks 1999", pi.PaymentIntentID, pi.Status, m.ID)
			// The create's answer is a replayed 500: the activity must list.
			return "/v1/payment_intents"
		},
		afterDecoy: func(e *confEnv, m confMsg) {
			// Stripe delivers the decoy's payment_intent.succeeded: it must
			// not settle the payment of 1999 either.
			row := confChargeLedger(e, m)
			if row.Ref == "" {
				return
			}
			e.stripeEvent(stripesim.EventIntentSucceeded, e.stripeObject("/v1/payment_intents/"+row.Ref))
		},
		second: func(m confMsg) (confMsg, int, string) {
			return confMsg{ID: m.ID + "-second", Order: m.Order}, 0, string(activities.PaymentBusinessDuplicate)
		},
		twin: "refund",
	}
	return k
}

// confChargeLedger is the payments row of m.
func confChargeLedger(e *confEnv, m confMsg) confRow {
	p, err := e.db.PaymentOf(context.Background(), "order-placed", m.ID)
	if errors.Is(err, store.ErrNotFound) {
		return confRow{}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return confRow{State: string(p.State), Ref: p.PaymentIntentID, Detail: p.FailureMessage}
}

func confRefundInput(m confMsg) activities.RefundInput {
	return activities.RefundInput{Consumer: "order-refund", MessageID: m.ID, OrderID: m.Order, Amount: m.Amount, Reason: "requested_by_customer"}
}

func confRefundKind() *confEffect {
	ledger := func(e *confEnv, m confMsg) confRow {
		r, err := e.db.RefundOf(context.Background(), "order-refund", m.ID)
		if errors.Is(err, store.ErrNotFound) {
			return confRow{}
		}
		if err != nil {
			e.t.Fatal(err)
		}
		return confRow{State: string(r.State), Ref: r.RefundID, Detail: fmt.Sprintf("amount %d %s", r.Amount, r.FailureMessage)}
	}
	return &confEffect{
		name: "refund", consumer: "order-refund", success: string(activities.RefundRefunded),
		message: func(id string) confMsg { return confMsg{ID: id, Order: 42, Amount: 500, PaymentID: id + "-paid"} },
		prepare: func(e *confEnv, m confMsg) { e.pay(m.PaymentID, m.Order) },
		call: func(bg context.Context, e *confEnv, m confMsg) (string, error) {
			r, err := confExecute(bg, e, e.acts.RefundOrder, confRefundInput(m))
			return string(r.Outcome), err
		},
		performed: func(e *confEnv, m confMsg) int { return e.stripe.Stats().RefundsByMessage[m.ID] },
		requests:  confStripeRequests,
		ledger:    ledger,
		proxy:     confStripeProxy, fault: confStripeFault, clearFaults: confStripeClear,
		revokeKey: confStripeRevoke, restoreKey: confStripeRestore, expireKey: confStripeExpire,
		webhookBeforeRecord: func(e *confEnv, _ confMsg, answer *httptest.ResponseRecorder) {
			// The answer is the Refund; Stripe reports it as charge.refunded
			// on the PaymentIntent's charge.
			var rf map[string]any
			if err := confJSON(answer, &rf); err != nil {
				e.t.Errorf("the refunding answer is not a Refund: %v %s", err, answer.Body.String())
				return
			}
			piID, _ := rf["payment_intent"].(string)
			pi := e.stripeObject("/v1/payment_intents/" + piID)
			e.stripeEvent(stripesim.EventChargeRefunded, map[string]any{
				"id": pi["latest_charge"], "object": "charge", "amount": pi["amount"], "amount_refunded": rf["amount"],
				"currency": pi["currency"], "payment_intent": piID, "refunded": false, "metadata": pi["metadata"],
			})
		},
		contradict: func(e *confEnv, m confMsg) {
			// An event tells that the recorded refund is pending again: a
			// move back, which no refund makes. (One that fails after it
			// succeeded is a move forward, and is recorded:
			// TestRefundFailingAfterItSucceeded.)
			rf := e.stripeObject("/v1/refunds/" + ledger(e, m).Ref)
			rf["status"] = "pending"
			e.stripeEvent("charge.refund.updated", rf)
		},
		contradictionKept: confStripeEventKept,
		decoy: func(e *confEnv, m confMsg) string {
			// A Refund naming the message, of 700 instead of 500, on the
			// order's PaymentIntent.
			p, err := e.db.PaymentOf(context.Background(), "order-placed", m.PaymentID)
			if err != nil {
				e.t.Fatal(err)
			}
			rf, err := e.acts.Payments.Refund(context.Background(), payment.RefundRequest{
				IdempotencyKey: "decoy:" + m.ID, MessageID: m.ID, OrderID: m.Order, PaymentIntentID: p.PaymentIntentID,
				Amount: m.Amount + 200, Reason: "requested_by_customer",
			})
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Logf("at stripe: Refund %s of %d usd naming %s; the message asks %d", rf.ID, rf.Amount, m.ID, m.Amount)
			return "/v1/refunds"
		},
		second: func(m confMsg) (confMsg, int, string) {
			// Another refund of the whole order after 500 were refunded:
			// beyond what remains, refused without calling Stripe.
			m2 := m
			m2.ID, m2.Amount = m.ID+"-second", 1999
			return m2, 0, string(activities.RefundExceedsPayment)
		},
		twin: "charge", twinFirst: true,
	}
}

// Shared by the kinds whose provider is SendGrid.
func confSendGridProxy(e *confEnv) *confProxy { return e.sendgridProxy }
func confSendGridRequests(e *confEnv) int     { return e.sendgrid.Stats().Requests }
func confSendGridFault(e *confEnv, m confMsg, kind simfault.Kind, status int) {
	e.sendgrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: m.ID}, Kind: kind, Status: status})
}
func confSendGridClear(e *confEnv)   { e.sendgrid.ClearFaults() }
func confSendGridRevoke(e *confEnv)  { e.acts.Mailer = e.emailClient("SG.revoked") }
func confSendGridRestore(e *confEnv) { e.acts.Mailer = e.emailClient(confSendGridKey) }
func confSendGridExpire(e *confEnv, _ confMsg) {
	// Past the grace: by the time the retry (or a redrive) runs, SendGrid's
	// events about the earlier send have long arrived.
	e.awaitSendGridEvents()
	e.clock.Advance(25 * time.Hour)
}
func confSendGridBeforeRecord(e *confEnv, _ confMsg, _ *httptest.ResponseRecorder) {
	// SendGrid's processed and delivered events reach the worker before
	// the 202 reaches the activity.
	e.awaitSendGridEvents()
}

// confMails are the mails SendGrid accepted for message id whose subject
// begins with subject.
func confMails(e *confEnv, id, subject string) []sendgridsim.Delivered {
	var out []sendgridsim.Delivered
	for _, d := range e.sendgrid.Messages() {
		if d.CustomArgs["message_id"] == id && strings.HasPrefix(d.Subject, subject) {
			out = append(out, d)
		}
	}
	return out
}

// confMailLedger is the receipt's ledger row of (consumer, id): the effects
// row that is neither the payment nor the refund.
func confMailLedger(e *confEnv, consumer, id string) confRow {
	rows, err := e.db.Pool().Query(context.Background(), `
		SELECT state, coalesce(provider_ref, ''), coalesce(error, '') FROM effects
		 WHERE consumer = $1 AND message_id = $2 AND kind NOT IN ('payment', 'refund')`, consumer, id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []confRow
	for rows.Next() {
		var r confRow
		if err := rows.Scan(&r.State, &r.Ref, &r.Detail); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	switch len(out) {
	case 0:
		return confRow{}
	case 1:
		return out[0]
	}
	return confRow{State: "ambiguous", Detail: fmt.Sprintf("%d receipt rows: %v", len(out), out)}
}

// confMailContradiction delivers SendGrid's processed event for another mail
// under the recorded receipt's key: SendGrid names an X-Message-Id that is
// not the one recorded.
func confMailContradiction(subject string) func(e *confEnv, m confMsg) {
	return func(e *confEnv, m confMsg) {
		sent := confMails(e, m.ID, subject)
		if len(sent) == 0 {
			e.t.Errorf("no mail to contradict")
			return
		}
		ev := map[string]any{}
		for k, v := range sent[0].CustomArgs {
			ev[k] = v
		}
		ev["email"], ev["event"], ev["timestamp"] = sent[0].To[0], "processed", time.Now().Unix()
		ev["sg_event_id"] = fmt.Sprintf("conformance-%s-%d", m.ID, e.seq.Add(1))
		ev["sg_message_id"] = "ANOTHERMAILxxxxxxxxxxx.filter0001.0"
		e.sendgridEvent(ev)
	}
}

func confSendGridEventKept(e *confEnv, m confMsg) {
	if n := e.rows(`SELECT count(*) FROM inbox WHERE consumer = 'sendgrid-events' AND message_id = $1`, fmt.Sprintf("conformance-%s-%d", m.ID, e.seq.Load())); n != 1 {
		e.t.Errorf("the contradicting sendgrid event is not in the inbox (%d rows)", n)
	}
}

const confNoAmount = "a receipt carries no amount its lookup could disagree with: its lookup is SendGrid's events under its " +
	"key (custom_args), and an event names a mail, not a sum; the receipt's own request is fingerprinted in the ledger " +
	"(IdempotencyMismatch), and an event of another key namespace is TestSendGridEventOfAnotherNamespaceIgnored"

// confReceiptInput is the receipt of the order m paid, as the workflow
// passes it: the PaymentIntent comes from the charge's result (pay's), not
// from Postgres, which a case may have taken away.
func confReceiptInput(e *confEnv, m confMsg) activities.ReceiptInput {
	pi, ok := e.paid.Load(m.ID)
	if !ok {
		p, err := e.db.PaymentOf(context.Background(), "order-placed", m.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		pi = p.PaymentIntentID
	}
	piID, _ := pi.(string)
	return activities.ReceiptInput{Consumer: "order-placed", MessageID: m.ID, OrderID: m.Order, Amount: 1999, Currency: "usd", To: "ada@example.com", PaymentIntentID: piID}
}

func confReceiptKind() *confEffect {
	const subject = "Your receipt for order"
	return &confEffect{
		name: "receipt", consumer: "order-placed", success: string(activities.ReceiptSent),
		// An order receipt belongs to the message that paid the order.
		message: func(id string) confMsg { return confMsg{ID: id, Order: 42, PaymentID: id} },
		prepare: func(e *confEnv, m confMsg) { e.pay(m.ID, m.Order) },
		call: func(bg context.Context, e *confEnv, m confMsg) (string, error) {
			r, err := confExecute(bg, e, e.acts.SendReceipt, confReceiptInput(e, m))
			return string(r.Outcome), err
		},
		performed: func(e *confEnv, m confMsg) int { return len(confMails(e, m.ID, subject)) },
		requests:  confSendGridRequests,
		ledger: func(e *confEnv, m confMsg) confRow {
			r := confMailLedger(e, "order-placed", m.ID)
			if st, err := e.db.Status(context.Background(), "order-placed", m.ID); err == nil {
				r.Detail += " receipt_status=" + st.Order.ReceiptStatus
			}
			return r
		},
		proxy: confSendGridProxy, fault: confSendGridFault, clearFaults: confSendGridClear,
		revokeKey: confSendGridRevoke, restoreKey: confSendGridRestore, expireKey: confSendGridExpire,
		webhookBeforeRecord: confSendGridBeforeRecord,
		contradict:          confMailContradiction(subject), contradictionKept: confSendGridEventKept,
		twin: "refund receipt",
		notApplicable: map[string]string{
			caseLookupAmount: confNoAmount,
			caseSecond: "the order receipt's business key is guarded before it: a second order.placed for the same order " +
				"is a business_duplicate at ChargeOrder (the charge row of this case) and OrderPlaced sends no receipt " +
				"for it (workflows tests); SendReceipt is only called by the message that holds the order",
		},
	}
}

func confRefundReceiptKind() *confEffect {
	const subject = "Your refund for order"
	input := func(m confMsg) activities.RefundReceiptInput {
		return activities.RefundReceiptInput{Consumer: "order-refund", MessageID: m.ID, OrderID: m.Order, Amount: m.Amount, Currency: "usd", RefundID: m.RefundID}
	}
	return &confEffect{
		name: "refund receipt", consumer: "order-refund", success: string(activities.ReceiptSent),
		message: func(id string) confMsg {
			return confMsg{ID: id, Order: 42, Amount: 500, PaymentID: id + "-paid", RefundID: "re_for_" + id}
		},
		// The address is the order's: the order.placed message in the inbox.
		prepare: func(e *confEnv, m confMsg) { e.pay(m.PaymentID, m.Order) },
		call: func(bg context.Context, e *confEnv, m confMsg) (string, error) {
			r, err := confExecute(bg, e, e.acts.SendRefundReceipt, input(m))
			return string(r.Outcome), err
		},
		performed: func(e *confEnv, m confMsg) int { return len(confMails(e, m.ID, subject)) },
		requests:  confSendGridRequests,
		ledger:    func(e *confEnv, m confMsg) confRow { return confMailLedger(e, "order-refund", m.ID) },
		proxy:     confSendGridProxy, fault: confSendGridFault, clearFaults: confSendGridClear,
		revokeKey: confSendGridRevoke, restoreKey: confSendGridRestore, expireKey: confSendGridExpire,
		webhookBeforeRecord: confSendGridBeforeRecord,
		contradict:          confMailContradiction(subject), contradictionKept: confSendGridEventKept,
		second: func(m confMsg) (confMsg, int, string) {
			// A second refund of the same order is a refund of its own: it
			// gets its own receipt, once.
			m2 := m
			m2.ID, m2.Amount, m2.RefundID = m.ID+"-second", 300, "re_for_"+m.ID+"-second"
			return m2, 1, ""
		},
		twin: "receipt",
		notApplicable: map[string]string{
			caseLookupAmount: confNoAmount,
		},
	}
}

// confHeldReceiptKind is the order's receipt as the workflow's local path
// sends it: the local charge attempt claims it in the payment's record and
// sends it under that claim (ChargeInput.ReceiptTo, ReceiptBudget). When
// that send records nothing, the workflow's SendReceipt claims the receipt
// through the ledger, which fences the first holder and looks the mail up
// first. Here an attempt runs the local charge: its held send, or, once the
// charge is recorded (it then holds no claim), SendReceipt. Every case
// hooks SendGrid; the charge itself goes to Stripe unhooked.
func confHeldReceiptKind() *confEffect {
	k := confReceiptKind()
	k.name = "receipt held by the charge"
	k.prepare = func(*confEnv, confMsg) {}
	k.call = func(bg context.Context, e *confEnv, m confMsg) (string, error) {
		in := confChargeInput(m.ID, m.Order)
		in.ReceiptTo, in.ReceiptBudget = "ada@example.com", 10*time.Second
		lc, err := confExecute(bg, e, e.acts.ChargeOrderLocally, in)
		switch {
		case err != nil:
			return "", err
		case lc.Err != nil:
			return "", lc.Err.Err()
		case lc.Result.Outcome == activities.PaymentBusinessDuplicate:
			return string(lc.Result.Outcome), nil // no receipt for it (OrderPlaced)
		case lc.Result.Outcome != activities.PaymentPaid:
			return "", fmt.Errorf("charge of %s: %s, want paid", m.ID, lc.Result.Outcome)
		case lc.Result.Receipt != nil:
			return string(lc.Result.Receipt.Outcome), nil
		case !lc.Result.Recorded:
			return "", errors.New("the payment's record claimed the receipt and its send recorded nothing: SendReceipt sends it")
		}
		r, err := confExecute(bg, e, e.acts.SendReceipt, confReceiptInput(e, m))
		return string(r.Outcome), err
	}
	k.second = func(m confMsg) (confMsg, int, string) {
		// A second order.placed for the same order is a business duplicate
		// at its charge: no receipt of its own.
		return confMsg{ID: m.ID + "-second", Order: m.Order, PaymentID: m.ID + "-second"}, 0, string(activities.PaymentBusinessDuplicate)
	}
	k.twin = "refund receipt held by the refund"
	k.notApplicable = map[string]string{caseLookupAmount: confNoAmount}
	return k
}

// confHeldRefundReceiptKind is the refund receipt as the workflow's local
// path sends it: the local refund attempt claims it in the refund's record
// and sends it under that claim (RefundInput.ReceiptBudget). That send is
// the receipt's first attempt; when it records nothing (its answer lost,
// a 503, a 401), the workflow's SendRefundReceipt goes on and claims the
// receipt through the ledger, which fences the first holder and looks the
// mail up first. Here an attempt runs the local refund: its held send, or,
// once the refund is recorded (it then holds no claim), SendRefundReceipt.
// Every case hooks SendGrid; the refund itself goes to Stripe unhooked.
func confHeldRefundReceiptKind() *confEffect {
	k := confRefundReceiptKind()
	k.name = "refund receipt held by the refund"
	k.message = func(id string) confMsg { return confMsg{ID: id, Order: 42, Amount: 500, PaymentID: id + "-paid"} }
	k.call = func(bg context.Context, e *confEnv, m confMsg) (string, error) {
		in := confRefundInput(m)
		in.ReceiptBudget = 10 * time.Second
		lr, err := confExecute(bg, e, e.acts.RefundOrderLocally, in)
		switch {
		case err != nil:
			return "", err
		case lr.Err != nil:
			return "", lr.Err.Err()
		case lr.Result.Outcome != activities.RefundRefunded:
			return "", fmt.Errorf("refund of %s: %s, want refunded", m.ID, lr.Result.Outcome)
		case lr.Result.Receipt != nil:
			return string(lr.Result.Receipt.Outcome), nil
		case !lr.Result.Recorded:
			return "", errors.New("the refund's record claimed the receipt and its send recorded nothing: SendRefundReceipt sends it")
		}
		r, err := confExecute(bg, e, e.acts.SendRefundReceipt, activities.RefundReceiptInput{
			Consumer: "order-refund", MessageID: m.ID, OrderID: m.Order, Amount: m.Amount, Currency: "usd", RefundID: lr.Result.RefundID,
		})
		return string(r.Outcome), err
	}
	k.second = func(m confMsg) (confMsg, int, string) {
		// A second refund of the same order is a refund of its own, with
		// its own receipt, once.
		m2 := m
		m2.ID, m2.Amount = m.ID+"-second", 300
		return m2, 1, ""
	}
	return k
}

// confIntakeRefundKind is a refund claimed at intake, as the workflow runs
// it: the message's inbox insert claims the refund (the amount reserved,
// the refunds row, the ledger row under claim 1), the first attempt is the
// local one, which takes that claim as its own and sends the refund
// receipt with the refund, and every later attempt is the regular
// activity, which claims through the ledger (claim 2 and on).
func confIntakeRefundKind() *confEffect {
	k := confRefundKind()
	k.name = "refund claimed at intake"
	pay := k.prepare
	k.prepare = func(e *confEnv, m confMsg) {
		pay(e, m)
		c, err := activities.IntakeRefundClaim(confRefundInput(m))
		if err != nil {
			e.t.Fatal(err)
		}
		r, err := e.db.InsertInbox(context.Background(), store.InboxEntry{Consumer: "order-refund", MessageID: m.ID,
			Payload: fmt.Appendf(nil, `{"id":%q}`, m.ID), PayloadHash: "h-" + m.ID, Source: "test", Refund: &c})
		switch {
		case err != nil:
			e.t.Fatal(err)
		case r.Claim > 0:
			e.intake.Store(m.ID, &message.Claim{Token: r.Claim, At: r.ClaimedAt, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency})
		case r.Inserted && m.Amount <= 1999-500: // the first refund of the paid order fits
			e.t.Fatalf("the intake claimed no refund for %s: %+v", m.ID, r)
		}
	}
	k.call = func(bg context.Context, e *confEnv, m confMsg) (string, error) {
		in := confRefundInput(m)
		c, _ := e.intake.LoadAndDelete(m.ID)
		claim, ok := c.(*message.Claim)
		if !ok {
			r, err := confExecute(bg, e, e.acts.RefundOrder, in)
			return string(r.Outcome), err
		}
		in.Claim, in.ReceiptBudget = claim, 10*time.Second
		lr, err := confExecute(bg, e, e.acts.RefundOrderLocally, in)
		if err == nil && lr.Err != nil {
			err = lr.Err.Err()
		}
		return string(lr.Result.Outcome), err
	}
	return k
}

// confJSON decodes a recorded answer.
func confJSON(answer *httptest.ResponseRecorder, v any) error {
	if answer.Code != http.StatusOK {
		return fmt.Errorf("status %d", answer.Code)
	}
	return json.Unmarshal(answer.Body.Bytes(), v)
}

// doneState is the ledger's state of k's effect performed and recorded.
func (k *confEffect) doneState() string {
	if k.done != "" {
		return k.done
	}
	return "succeeded"
}

// confPendingRefundKind is a refund Stripe answers pending (the order paid
// with pm_card_pendingRefund): done once it is recorded pending, its amount
// reserved and no receipt sent, whatever happened to the call.
func confPendingRefundKind() *confEffect {
	k := confRefundKind()
	k.name = "pending refund"
	k.success, k.done = string(activities.RefundPending), string(store.RefundPending)
	k.prepare = func(e *confEnv, m confMsg) { e.payWith(m.PaymentID, m.Order, "pm_card_pendingRefund") }
	k.notApplicable = map[string]string{
		caseHookContra: "every later status of a pending refund is a move forward, and is recorded (TestPendingRefundSettles…)",
	}
	return k
}
