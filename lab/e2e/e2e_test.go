package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

func order(id string, orderID int64, pm string) []byte {
	return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": %q}}`, id, orderID, pm)
}

func accept(t *testing.T, s *testenv.Stack, raw []byte) intake.Result {
	t.Helper()
	res, err := s.Intake.Accept(context.Background(), raw, "test")
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return res
}

// wait returns the workflow's result once it has closed.
func wait(t *testing.T, s *testenv.Stack, messageID string) workflows.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var st workflows.Status
	wfID, _ := identity.WorkflowID(message.ConsumerOrderPlaced, messageID)
	if err := s.Client.GetWorkflow(ctx, wfID, "").Get(ctx, &st); err != nil {
		t.Fatalf("workflow %s: %v", wfID, err)
	}
	return st
}

// workflowsFor counts the runs Temporal has for a message, by search attribute.
func workflowsFor(t *testing.T, c client.Client, messageID string) int {
	t.Helper()
	ctx := context.Background()
	query := fmt.Sprintf("MessageId = %q", messageID)
	var n int
	// Visibility is eventually consistent: poll until the count settles.
	for range 50 {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("count workflows: %v", err)
		}
		n = int(resp.GetCount())
		if n > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// expectOnce asserts what a user must see for a paid message however many
// copies arrived: one workflow, one charge, one receipt, one processed row.
func expectOnce(t *testing.T, s *testenv.Stack, messageID string) {
	t.Helper()
	if n := workflowsFor(t, s.Client, messageID); n != 1 {
		t.Errorf("%s: workflows = %d, want 1", messageID, n)
	}
	if n := s.Sims.Stripe.Stats().ChargesByMessage[messageID]; n != 1 {
		t.Errorf("%s: charges = %d, want 1", messageID, n)
	}
	if n := s.Sims.SendGrid.Stats().DeliveriesByKey["email:"+messageID]; n != 1 {
		t.Errorf("%s: emails = %d, want 1", messageID, n)
	}
	if n := count(t, s, `SELECT count(*) FROM processed_messages WHERE message_id = $1`, messageID); n != 1 {
		t.Errorf("%s: processed rows = %d, want 1", messageID, n)
	}
}

func count(t *testing.T, s *testenv.Stack, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Store.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestPaidMessageShortPath: a paid message with no fault takes the short
// path end to end: the intake claims the payment with the inbox row, the
// local charge takes that claim (claim 1, no claim of its own), its record
// claims the receipt, which the charge sends (claim 1), and marks the inbox
// row dispatched.
func TestPaidMessageShortPath(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	const id = "evt_short"
	if r := accept(t, s, order(id, 43, "pm_card_visa")); r.Status != intake.StatusStarted {
		t.Fatalf("accept = %+v", r)
	}
	st := wait(t, s, id)
	if st.Outcome != workflows.OutcomeCompleted || len(st.Fallbacks) != 0 || st.Payment == nil || st.Payment.Receipt == nil || st.Receipt == nil ||
		*st.Receipt != *st.Payment.Receipt {
		t.Fatalf("status = %+v; want completed locally, the receipt sent by the charge", st)
	}
	expectOnce(t, s, id)
	for _, key := range []string{"payment:" + id, "email:" + id} {
		if e, err := s.Store.Effect(context.Background(), key); err != nil || e.Claim != 1 || e.State != store.StateSucceeded {
			t.Errorf("%s = %+v, %v; want succeeded under claim 1", key, e, err)
		}
	}
	ms, err := s.Store.Status(context.Background(), message.ConsumerOrderPlaced, id)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Inbox == nil || ms.Inbox.State != store.InboxDispatched || ms.Inbox.WorkflowID != "order-placed/"+id || ms.Order.ReceiptStatus != "sent" {
		t.Errorf("inbox %+v, order %+v; want dispatched by its workflow, receipt sent", ms.Inbox, ms.Order)
	}
}

func TestDuplicateWhileRunningAndAfterCompletion(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	// Hold the charge for a moment so the copy arrives while the workflow runs.
	s.Sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_91c2"}, Kind: stripesim.FaultDelay, Delay: 1500 * time.Millisecond, Times: 1})

	raw := order("evt_91c2", 42, "pm_card_visa")
	if r := accept(t, s, raw); r.Status != intake.StatusStarted || r.WorkflowID != "order-placed/evt_91c2" {
		t.Fatalf("first copy = %+v", r)
	}
	if r := accept(t, s, raw); r.Status != intake.StatusDuplicate {
		t.Fatalf("copy while running = %+v", r)
	}
	st := wait(t, s, "evt_91c2")
	if st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	if r := accept(t, s, raw); r.Status != intake.StatusDuplicate {
		t.Fatalf("copy after completion = %+v", r)
	}

	expectOnce(t, s, "evt_91c2")
	ms, err := s.Store.Status(context.Background(), message.ConsumerOrderPlaced, "evt_91c2")
	if err != nil {
		t.Fatal(err)
	}
	if ms.Order.Status != store.OrderPaid || ms.Order.ReceiptStatus != "sent" || ms.Inbox.Duplicates != 2 {
		t.Errorf("status = order %+v inbox %+v", ms.Order, ms.Inbox)
	}
}

// TestTemporalRejectsCopies checks the second line of defence on its own:
// with the inbox bypassed, Temporal's ID policies still refuse a copy of a
// running and of a completed workflow, and the SDK reports it instead of
// returning the old run.
func TestTemporalRejectsCopies(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	s.Sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultDelay, Delay: time.Second, Times: 1})
	m, err := route.Default().Decode(order("evt_t1", 7, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if started, err := s.Intake.Start(ctx, m); err != nil || !started {
		t.Fatalf("first start = %v, %v", started, err)
	}
	if started, err := s.Intake.Start(ctx, m); err != nil || started {
		t.Fatalf("start while running = %v, %v; want a duplicate", started, err)
	}
	wait(t, s, "evt_t1")
	if started, err := s.Intake.Start(ctx, m); err != nil || started {
		t.Fatalf("start after completion = %v, %v; want a duplicate", started, err)
	}
	if n := workflowsFor(t, s.Client, "evt_t1"); n != 1 {
		t.Errorf("workflows = %d, want 1", n)
	}
	if n := s.Sims.Stripe.Stats().Charges; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
}

// TestChargePerformedResponseLost: the answers to both the create and the
// confirmation are lost after Stripe performed them, while Search lags by a
// minute (the simulator's default). The retries replay under the derived
// keys; nothing is searched, nothing is unknown, one charge.
func TestChargePerformedResponseLost(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	s.Sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_lost"}, Kind: stripesim.FaultLostAfter, Times: 2})
	if r := accept(t, s, order("evt_lost", 9, "pm_card_visa")); r.Status != intake.StatusStarted {
		t.Fatalf("accept = %+v", r)
	}
	st := wait(t, s, "evt_lost")
	if st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	stats := s.Sims.Stripe.Stats()
	if stats.ChargesByMessage["evt_lost"] != 1 {
		t.Errorf("charges = %d, want 1 (the retry must replay, not charge)", stats.ChargesByMessage["evt_lost"])
	}
	if stats.Replays < 2 {
		t.Errorf("replays = %d: the retries did not reuse the create and confirm keys", stats.Replays)
	}
	if stats.RequestsByOperation["search"] != 0 {
		t.Errorf("search requests = %d: read-after-write must not search", stats.RequestsByOperation["search"])
	}
	p, err := s.Store.PaymentOf(context.Background(), message.ConsumerOrderPlaced, "evt_lost")
	if err != nil || p.State != store.PaymentSucceeded || p.PaymentIntentID == "" || p.Key != "payment:evt_lost" {
		t.Fatalf("payment = %+v, %v", p, err)
	}
}

func TestDeclinedCard(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	accept(t, s, order("evt_decl", 44, "pm_card_chargeDeclined"))
	st := wait(t, s, "evt_decl")
	if st.Outcome != workflows.OutcomePaymentFailed || st.Payment.DeclineCode != "generic_decline" {
		t.Fatalf("outcome = %+v", st)
	}
	ms, err := s.Store.Status(context.Background(), message.ConsumerOrderPlaced, "evt_decl")
	if err != nil {
		t.Fatal(err)
	}
	if ms.Order.Status != store.OrderPaymentFailed || ms.Processed.Outcome != store.OutcomePaymentFailed {
		t.Errorf("order = %+v processed = %+v", ms.Order, ms.Processed)
	}
	if n := s.Sims.SendGrid.Stats().Deliveries; n != 0 {
		t.Errorf("receipts sent = %d, want 0", n)
	}
	if n := s.Sims.Stripe.Stats().Charges; n != 0 {
		t.Errorf("charges = %d, want 0", n)
	}
}

func TestTwoMessagesOneOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	accept(t, s, order("evt_a", 42, "pm_card_visa"))
	if st := wait(t, s, "evt_a"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("first = %+v", st)
	}
	accept(t, s, order("evt_b", 42, "pm_card_visa"))
	st := wait(t, s, "evt_b")
	if st.Outcome != workflows.OutcomeBusinessDuplicate || st.Payment.HeldBy != "evt_a" {
		t.Fatalf("second = %+v", st)
	}
	if n := s.Sims.Stripe.Stats().Charges; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
	if n := s.Sims.SendGrid.Stats().Deliveries; n != 1 {
		t.Errorf("emails = %d, want 1", n)
	}
	if n := count(t, s, `SELECT count(*) FROM processed_messages WHERE outcome = 'business_duplicate' AND message_id = 'evt_b'`); n != 1 {
		t.Errorf("business duplicate rows = %d, want 1", n)
	}
}

func TestMalformedMessagesStartNothing(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	cases := []struct {
		raw, field string
	}{
		{`{"id": "evt_m1", "type": "order.placed", "data": {"order_id": 1, "amount": -5, "currency": "usd", "customer_email": "a@example.com", "payment_method": "pm_card_visa"}}`, "data.amount"},
		{`{"id": "evt_m2", "type": "order.placed", "data": {"order_id": 1, "amount": 5, "currency": "usd", "customer_email": "not-an-email", "payment_method": "pm_card_visa"}}`, "data.customer_email"},
		{`{"id": "evt m3", "type": "order.placed", "data": {}}`, "id"},
		{`{"id": "evt_m4", "type": "order.cancelled", "data": {}}`, "type"},
		{`{"id": "evt_m5", "type": "order.placed", "data": {"order_id": 1, "amount": 5, "currency": "zzz", "customer_email": "a@example.com", "payment_method": "pm_card_visa"}}`, "data.currency"},
		{`{"id": "evt_m6", `, ""},
		{`not json`, ""},
	}
	for _, c := range cases {
		r := accept(t, s, []byte(c.raw))
		if r.Status != intake.StatusInvalid || r.QuarantineID == 0 || !strings.Contains(r.Error, c.field) {
			t.Errorf("%s: result = %+v, want invalid naming %q", c.raw, r, c.field)
		}
	}
	if n := count(t, s, `SELECT count(*) FROM quarantine WHERE reason = 'invalid'`); n != len(cases) {
		t.Errorf("quarantined = %d, want %d", n, len(cases))
	}
	if n := count(t, s, `SELECT count(*) FROM inbox`); n != 0 {
		t.Errorf("inbox rows = %d, want 0", n)
	}
	resp, err := s.Client.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCount() != 0 {
		t.Errorf("workflows started = %d, want 0", resp.GetCount())
	}
}

func TestSameIDDifferentPayloadIsQuarantined(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	accept(t, s, order("evt_p", 50, "pm_card_visa"))
	wait(t, s, "evt_p")
	r := accept(t, s, order("evt_p", 51, "pm_card_visa"))
	if r.Status != intake.StatusInvalid || r.Reason != store.ReasonPayloadMismatch {
		t.Fatalf("result = %+v", r)
	}
	if n := s.Sims.Stripe.Stats().Charges; n != 1 {
		t.Errorf("charges = %d, want 1", n)
	}
}

// TestCrashWindowsAtIntake replays the two intake crash windows: the inbox
// row written but no workflow started, and the workflow started but the row
// not marked. In both, the next copy settles the message with one workflow.
func TestCrashWindowsAtIntake(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	ctx := context.Background()

	// Window 1: inserted, then the process died before the start.
	raw := order("evt_w1", 61, "pm_card_visa")
	m, err := route.Default().Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.InsertInbox(ctx, store.InboxEntry{Consumer: m.Consumer, MessageID: m.ID, Payload: m.Raw, PayloadHash: m.Hash(), Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if r := accept(t, s, raw); r.Status != intake.StatusStarted {
		t.Fatalf("copy after a crash before the start = %+v, want started", r)
	}

	// Window 2: inserted and started, then the process died before the mark.
	raw2 := order("evt_w2", 62, "pm_card_visa")
	m2, err := route.Default().Decode(raw2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.InsertInbox(ctx, store.InboxEntry{Consumer: m2.Consumer, MessageID: m2.ID, Payload: m2.Raw, PayloadHash: m2.Hash(), Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if started, err := s.Intake.Start(ctx, m2); err != nil || !started {
		t.Fatalf("start = %v, %v", started, err)
	}
	if r := accept(t, s, raw2); r.Status != intake.StatusDuplicate {
		t.Fatalf("copy after a crash before the mark = %+v, want duplicate", r)
	}
	ms, err := s.Store.Status(ctx, m2.Consumer, m2.ID)
	if err != nil || ms.Inbox.State != store.InboxDispatched {
		t.Fatalf("inbox after the copy = %+v, %v", ms.Inbox, err)
	}

	for _, id := range []string{"evt_w1", "evt_w2"} {
		if st := wait(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s outcome = %+v", id, st)
		}
		if n := workflowsFor(t, s.Client, id); n != 1 {
			t.Errorf("%s workflows = %d, want 1", id, n)
		}
		if n := s.Sims.Stripe.Stats().ChargesByMessage[id]; n != 1 {
			t.Errorf("%s charges = %d, want 1", id, n)
		}
	}
}
