package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/testenv"
)

// batchExpect is what the operator commands must answer for one message ID
// of the batch: the exit codes that README "The starter CLI" and the
// package doc document for the state the batch leaves the message in.
//
// The refund rows are the ones to adjust when resolve and redrive learn
// refunds and refund receipts (branch ledger): today resolve knows only
// payments (exit 4 for a refund: no payment recorded).
type batchExpect struct {
	status, resolve, redrive int
	// retry is the exit code of `quarantine retry` for each of the
	// message's quarantine rows, by reason.
	retry map[string]int
	// statusAfter is status once every command above ran.
	statusAfter int
}

// batchExpectations is the table TestOperatorCommandsOnARealBatch checks.
var batchExpectations = map[string]batchExpect{
	// Charged, receipt sent, workflow completed; a copy was counted.
	"evt_op_paid": {status: exitOK, resolve: exitOK, redrive: exitRefused, statusAfter: exitOK},
	// Processed with its first payload; a second payload under the same ID
	// is quarantined, and sending it again is quarantined again.
	"evt_op_mismatch": {status: exitOK, resolve: exitOK, redrive: exitRefused,
		retry: map[string]int{store.ReasonPayloadMismatch: exitInvalid}, statusAfter: exitOK},
	// Declined: payment failed, workflow completed as payment_failed.
	"evt_op_declined": {status: exitOK, resolve: exitOK, redrive: exitRefused, statusAfter: exitOK},
	// Stripe still processing: resolve says so, redrive refuses (a charge
	// may exist).
	"evt_op_processing": {status: exitOK, resolve: exitStillOpen, redrive: exitRefused, statusAfter: exitOK},
	// Invalid: only a quarantine row names it.
	"evt_op_invalid": {status: exitOK, resolve: exitNotFound, redrive: exitNotFound,
		retry: map[string]int{store.ReasonInvalid: exitInvalid}, statusAfter: exitOK},
	// Postgres refused its row on every delivery: quarantined as
	// max_deliver; once the cause is gone, retry starts it.
	"evt_op_poison": {status: exitOK, resolve: exitNotFound, redrive: exitNotFound,
		retry: map[string]int{store.ReasonMaxDeliver: exitOK}, statusAfter: exitOK},
	// Refunded, refund receipt sent; a copy was counted. resolve finds the
	// refund and its receipt settled.
	"evt_op_refund": {status: exitOK, resolve: exitOK, redrive: exitRefused, statusAfter: exitOK},
	// A refund whose ID came again with another amount.
	"evt_op_refund_mm": {status: exitOK, resolve: exitOK, redrive: exitRefused,
		retry: map[string]int{store.ReasonPayloadMismatch: exitInvalid}, statusAfter: exitOK},
	// A refund of an order that was never charged.
	"evt_op_refund_unpaid": {status: exitOK, resolve: exitNotFound, redrive: exitRefused, statusAfter: exitOK},
	// A type no worker knows: handed back until its last delivery, then
	// quarantined as invalid.
	"evt_op_cancel": {status: exitOK, resolve: exitNotFound, redrive: exitNotFound,
		retry: map[string]int{store.ReasonInvalid: exitInvalid}, statusAfter: exitOK},
	// Never seen.
	"evt_op_unknown": {status: exitNotFound, resolve: exitNotFound, redrive: exitNotFound, statusAfter: exitNotFound},
}

// noIDRetry is the exit code of `quarantine retry` for the quarantine rows
// that name no message (a line that is not JSON).
const noIDRetry = exitInvalid

func batchOrder(id string, order, amount int64, pm string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":%d,"currency":"usd","customer_email":"ada@example.com","payment_method":%q}}`, id, order, amount, pm)
}

func batchRefund(id string, order, amount int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"order.refund_requested","data":{"order_id":%d,"amount":%d,"reason":"requested_by_customer"}}`, id, order, amount)
}

// TestOperatorCommandsOnARealBatch runs a real batch through JetStream and
// the worker (copies, payload mismatches, invalid lines, a max-deliver
// poison message, both message types, a type no worker knows), then calls
// every read and operator command on every message ID it produced and
// checks the documented exit code of each (batchExpectations).
func TestOperatorCommandsOnARealBatch(t *testing.T) {
	s := operatorStack(t)
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	ctx := context.Background()
	lift := s.RefuseInbox(t, "evt_op_poison")
	p := s.StartProcess(t, j, j.ConsumerConfig(t, 500*time.Millisecond, 3), intake.DispatcherConfig{})
	publish := func(raws ...[]byte) {
		for _, raw := range raws {
			j.Publish(t, raw, "") // no Nats-Msg-Id: every copy reaches the inbox
		}
	}

	// Orders first, refunds once their orders are settled.
	paid := batchOrder("evt_op_paid", 801, 1999, "pm_card_visa")
	publish(paid, paid,
		batchOrder("evt_op_mismatch", 802, 1999, "pm_card_visa"),
		batchOrder("evt_op_declined", 803, 1999, "pm_card_chargeDeclined"),
		batchOrder("evt_op_processing", 804, 1999, "pm_card_processing"),
		batchOrder("evt_op_poison", 805, 1999, "pm_card_visa"),
		[]byte(`{"id":"evt_op_invalid","type":"order.placed","data":{"order_id":-1}}`),
		[]byte(`not json at all`),
		[]byte(`{"id":"evt_op_cancel","type":"order.cancelled","data":{"order_id":801}}`),
	)
	waitClosed(t, s, "order-placed", "evt_op_paid", "evt_op_mismatch", "evt_op_declined")
	waitPayment(t, s, "evt_op_processing", store.PaymentProcessing)
	publish(batchOrder("evt_op_mismatch", 802, 2500, "pm_card_visa"))
	refund := batchRefund("evt_op_refund", 801, 500)
	publish(refund, refund,
		batchRefund("evt_op_refund_mm", 801, 300),
		batchRefund("evt_op_refund_unpaid", 899, 100),
	)
	waitClosed(t, s, "order-refund", "evt_op_refund", "evt_op_refund_mm", "evt_op_refund_unpaid")
	publish(batchRefund("evt_op_refund_mm", 801, 301))
	testenv.Eventually(t, 30*time.Second, "the batch's quarantine rows", func() bool {
		return p.Consumer.Stats().MaxDelivered == 1 && len(quarantineOf(t, s)) == 6
	})
	lift()

	// Every message ID the batch left in Postgres has a row in the table.
	var produced []string
	rows, err := s.Store.Pool().Query(ctx, `SELECT message_id FROM inbox UNION SELECT message_id FROM quarantine WHERE message_id IS NOT NULL ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		produced = append(produced, id)
		if _, ok := batchExpectations[id]; !ok {
			t.Errorf("the batch produced message %s, which batchExpectations does not cover", id)
		}
	}
	rows.Close()
	ids := make([]string, 0, len(batchExpectations))
	for id := range batchExpectations {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	check := func(want int, args ...string) {
		t.Helper()
		code, out, stderr := runStarter(t, args...)
		t.Logf("starter %v: exit %d", args, code)
		if code != want {
			t.Errorf("starter %v: exit %d, want %d\nstdout: %.600s\nstderr: %.600s", args, code, want, out, stderr)
		}
	}
	for _, state := range store.OpenPaymentStates {
		check(exitOK, "payments", "--state", string(state))
	}
	check(exitOK, "quarantine", "list")
	for _, id := range ids {
		check(batchExpectations[id].status, "status", id)
	}
	for _, id := range ids {
		check(batchExpectations[id].resolve, "resolve", id)
	}
	for _, id := range ids {
		check(batchExpectations[id].redrive, "redrive", id)
	}
	for _, q := range quarantineOf(t, s) {
		want := noIDRetry
		if q.MessageID != "" {
			w, ok := batchExpectations[q.MessageID].retry[q.Reason]
			if !ok {
				t.Errorf("quarantine row %d (%s, %s) has no expected retry code", q.ID, q.MessageID, q.Reason)
				continue
			}
			want = w
		}
		check(want, "quarantine", "retry", strconv.FormatInt(q.ID, 10))
	}
	check(exitOK, "quarantine", "list")
	for _, id := range ids {
		check(batchExpectations[id].statusAfter, "status", id)
	}
	if len(produced) == 0 {
		t.Fatal("the batch produced no message")
	}
	// The retried poison message ran; no command charged anything twice.
	waitClosed(t, s, "order-placed", "evt_op_poison")
	charges := s.Sims.Stripe.Stats().ChargesByMessage
	for _, id := range []string{"evt_op_paid", "evt_op_mismatch", "evt_op_poison"} {
		if charges[id] != 1 {
			t.Errorf("%s charged %d times, want 1", id, charges[id])
		}
	}
	if charges["evt_op_declined"] > 1 || charges["evt_op_processing"] > 1 {
		t.Errorf("charges = %v: a declined or processing payment was charged again", charges)
	}
}

// quarantineOf returns the stack's quarantine rows.
func quarantineOf(t *testing.T, s *testenv.Stack) []store.QuarantineEntry {
	t.Helper()
	q, err := s.Store.QuarantineList(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// waitClosed waits until the workflows of consumer's messages ids are
// closed, whatever their outcome.
func waitClosed(t *testing.T, s *testenv.Stack, consumer string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		testenv.Eventually(t, 60*time.Second, consumer+"/"+id+" started", func() bool {
			_, err := s.Client.DescribeWorkflow(ctx, consumer+"/"+id, "")
			return err == nil
		})
		_ = s.Client.GetWorkflow(ctx, consumer+"/"+id, "").Get(ctx, nil)
		cancel()
	}
}
