package activities_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/sim/sendgridsim"
)

// TestOutcomeEventsForEveryTerminalOutcome: each terminal outcome of a
// message puts one event in the outbox, with an ID derived from the
// message, in the transaction that records it; repeating the activity adds
// none.
func TestOutcomeEventsForEveryTerminalOutcome(t *testing.T) {
	e := newConfEnv(t)
	ctx := context.Background()
	exec := func(fn func() (any, error)) {
		t.Helper()
		for range 2 { // the second run is a retry: it must add nothing
			if r, err := fn(); err != nil {
				t.Fatalf("%+v, %v", r, err)
			}
		}
	}
	e.pay("evt_ev_paid", 1)
	exec(func() (any, error) { // another message for the same order
		return confExecute(ctx, e, e.acts.ChargeOrder, confChargeInput("evt_ev_dup", 1))
	})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.ChargeOrder, activities.ChargeInput{Consumer: "order-placed", MessageID: "evt_ev_declined",
			OrderID: 2, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_chargeDeclined"})
	})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_ev_refund", Order: 1, Amount: 500}))
	})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_ev_too_much", Order: 1, Amount: 5000}))
	})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.RefundOrder, confRefundInput(confMsg{ID: "evt_ev_unpaid", Order: 2, Amount: 100}))
	})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.SendReceipt, confReceiptInput(e, confMsg{ID: "evt_ev_paid", Order: 1}))
	})
	e.pay("evt_ev_bounced", 3)
	e.sendgrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 400, Times: 1})
	exec(func() (any, error) {
		return confExecute(ctx, e, e.acts.SendReceipt, confReceiptInput(e, confMsg{ID: "evt_ev_bounced", Order: 3}))
	})
	want := map[string]string{
		"order.paid:evt_ev_paid":               "",
		"order.paid:evt_ev_bounced":            "",
		"order.business_duplicate:evt_ev_dup":  "business_duplicate",
		"order.payment_failed:evt_ev_declined": "payment_failed",
		"refund.refunded:evt_ev_refund":        "refunded",
		"refund.refused:evt_ev_too_much":       "refund_exceeds_payment",
		"refund.refused:evt_ev_unpaid":         "order_not_paid",
		"receipt.sent:evt_ev_paid":             "",
		"receipt.failed:evt_ev_bounced":        "",
	}
	rows, err := e.db.Pool().Query(ctx, `SELECT event_id, topic, payload FROM outbox ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var id, topic string
		var payload []byte
		if err := rows.Scan(&id, &topic, &payload); err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := json.Unmarshal(payload, &p); err != nil {
			t.Fatal(err)
		}
		outcome, ok := want[id]
		switch {
		case !ok:
			t.Errorf("unexpected event %s %s", id, payload)
		case p["type"] != topic || p["message_id"] == nil:
			t.Errorf("event %s: payload %s, want type %s and the message ID", id, payload, topic)
		case outcome != "" && p["outcome"] != outcome:
			t.Errorf("event %s: payload %s, want outcome %s", id, payload, outcome)
		}
		got[id] = true
	}
	for id := range want {
		if !got[id] {
			t.Errorf("no event %s", id)
		}
	}
}
