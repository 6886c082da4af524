package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/workflows"
)

// bulkLines splits a bulk command's stdout into its row lines and its
// summary (the last line).
func bulkLines(t *testing.T, out string) ([]bulkRow, bulkSummary) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows []bulkRow
	for _, l := range lines[:len(lines)-1] {
		var r bulkRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("row line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	var s bulkSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("summary line %q: %v", lines[len(lines)-1], err)
	}
	return rows, s
}

// processing charges n orders with a method Stripe leaves processing.
func (f *opsFixture) processing(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_bulk_%d", i)
		if r, err := f.charge(t, id, int64(100+i), "pm_card_processing"); err != nil || r.Outcome != activities.PaymentProcessing {
			t.Fatalf("%s: %+v, %v", id, r, err)
		}
		raw := fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_processing"}}`, id, 100+i)
		if _, err := f.db.InsertInbox(context.Background(), store.InboxEntry{Consumer: "order-placed", MessageID: id, Payload: raw, PayloadHash: "h-" + id, Source: "test"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (f *opsFixture) states(t *testing.T) map[string]store.PaymentState {
	t.Helper()
	rows, err := f.db.Pool().Query(context.Background(), `SELECT message_id, state FROM payments`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]store.PaymentState{}
	for rows.Next() {
		var id string
		var st store.PaymentState
		if err := rows.Scan(&id, &st); err != nil {
			t.Fatal(err)
		}
		out[id] = st
	}
	return out
}

// TestBulkResolveDryRunThenResume: a dry run counts and shows the rows and
// changes nothing; a run stopped by --max names its cursor, and the run
// given it goes on with the rest, none twice.
func TestBulkResolveDryRunThenResume(t *testing.T) {
	f := newOpsFixture(t)
	ids := f.processing(t, 3)
	code, out, errOut := runStarter(t, "resolve", "--state", "processing", "--dry-run")
	rows, sum := bulkLines(t, out)
	if code != exitOK || len(rows) != 0 || sum.Selected != 3 || len(sum.First) != 3 || !sum.DryRun || sum.First[0].MessageID != ids[0] {
		t.Fatalf("dry run: exit %d, rows %v, summary %+v, stderr %s; want 3 selected and shown, nothing run", code, rows, sum, errOut)
	}
	for id, st := range f.states(t) {
		if st != store.PaymentProcessing {
			t.Errorf("dry run changed %s to %s", id, st)
		}
	}
	// Stripe settles them; resolve records it.
	for _, id := range ids {
		p, err := f.db.PaymentOf(context.Background(), "order-placed", id)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.sims.Stripe.SettleProcessing(p.PaymentIntentID, true); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = runStarter(t, "resolve", "--consumer", "order-placed", "--since", "1h", "--rate", "50", "--max", "2")
	rows, sum = bulkLines(t, out)
	if code != exitError || len(rows) != 2 || !sum.Stopped || sum.GoOn != "--after order-placed/"+ids[1] || sum.ByResult["done"] != 2 {
		t.Fatalf("stopped run: exit %d, rows %+v, summary %+v, stderr %s; want 2 done and --after order-placed/%s", code, rows, sum, errOut, ids[1])
	}
	if !strings.Contains(errOut, "go on with --after") {
		t.Errorf("stderr %q does not say how to go on", errOut)
	}
	code, out, errOut = runStarter(t, "resolve", "--consumer", "order-placed", "--since", "1h", "--rate", "50", "--after", "order-placed/"+ids[1])
	rows, sum = bulkLines(t, out)
	if code != exitOK || len(rows) != 1 || rows[0].MessageID != ids[2] || sum.Stopped || sum.Done != 1 {
		t.Fatalf("resumed run: exit %d, rows %+v, summary %+v, stderr %s; want only %s", code, rows, sum, errOut, ids[2])
	}
	for id, st := range f.states(t) {
		if st != store.PaymentSucceeded {
			t.Errorf("%s is %s after the runs, want succeeded", id, st)
		}
	}
}

// TestBulkRedriveRefusesEachRowSayingWhy: a bulk redrive of payments that
// may have charged refuses each row, with the reason one redrive gives,
// and changes nothing.
func TestBulkRedriveRefusesEachRowSayingWhy(t *testing.T) {
	f := newOpsFixture(t)
	ids := f.processing(t, 2)
	code, out, errOut := runStarter(t, "redrive", "--state", "processing", "--rate", "50")
	rows, sum := bulkLines(t, out)
	if code != exitRefused || len(rows) != 2 || sum.ByResult["refused"] != 2 {
		t.Fatalf("bulk redrive: exit %d, rows %+v, summary %+v, stderr %s; want both refused, exit 6", code, rows, sum, errOut)
	}
	for i, r := range rows {
		if r.MessageID != ids[i] || r.Exit != exitRefused || !strings.Contains(r.Reason, "payment is processing with payment intent") {
			t.Errorf("row %+v: want %s refused because a charge may exist", r, ids[i])
		}
		// The same answer as one redrive of it.
		one, oneOut, _ := runStarter(t, "redrive", r.MessageID)
		if one != r.Exit || !strings.Contains(oneOut, "payment is processing") {
			t.Errorf("one redrive of %s: exit %d %q; the bulk row said %d", r.MessageID, one, oneOut, r.Exit)
		}
	}
	if code, _, errOut := runStarter(t, "redrive", "--state", "bogus"); code != exitUsage || !strings.Contains(errOut, "bogus") {
		t.Errorf("bad state: exit %d %q, want 2 naming it", code, errOut)
	}
}

// TestBulkQuarantineRetryDryRunByReason: the filter selects by reason and
// the dry run marks nothing retried.
func TestBulkQuarantineRetryDryRunByReason(t *testing.T) {
	f := newOpsFixture(t)
	ctx := context.Background()
	for i, reason := range []string{store.ReasonInvalid, store.ReasonInvalid, store.ReasonMaxDeliver} {
		if _, err := f.db.Quarantine(ctx, store.QuarantineEntry{Source: "test", Raw: fmt.Appendf(nil, `{"id":"evt_q%d"}`, i), Reason: reason, Detail: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runStarter(t, "quarantine", "retry", "--reason", store.ReasonInvalid, "--dry-run")
	_, sum := bulkLines(t, out)
	if code != exitOK || sum.Selected != 2 || len(sum.First) != 2 || sum.First[0].QuarantineReason != store.ReasonInvalid {
		t.Fatalf("dry run: exit %d, summary %+v, stderr %s; want the 2 invalid rows", code, sum, errOut)
	}
	var retried int
	if err := f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM quarantine WHERE retried_at IS NOT NULL`).Scan(&retried); err != nil || retried != 0 {
		t.Errorf("dry run marked %d rows retried (%v), want 0", retried, err)
	}
	if code, _, _ := runStarter(t, "quarantine", "retry", "--state", "failed"); code != exitUsage {
		t.Errorf("quarantine retry --state: exit %d, want 2", code)
	}
}

// TestBulkRedriveAfterAnOutage: Stripe is down, the runs are terminated with
// their payments claimed and nothing charged; once it is back, one bulk
// redrive runs them all again: each charged once, one receipt each, keys
// derived as for one redrive. It logs the rows per second.
func TestBulkRedriveAfterAnOutage(t *testing.T) {
	s := operatorStack(t)
	ctx := context.Background()
	const n = 20
	// 429s: answered before anything is executed, so nothing is ambiguous.
	s.Sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultRateLimit, Times: 1 << 20})
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_outage_%02d", i)
		placeOrder(t, s, id, int64(300+i), "pm_card_visa")
		ids = append(ids, id)
	}
	for _, id := range ids {
		waitPayment(t, s, id, store.PaymentClaimed)
		if err := s.Client.TerminateWorkflow(ctx, "order-placed/"+id, "", "test: stopped during the outage"); err != nil {
			t.Fatal(err)
		}
	}
	// Attempts already running when their run was terminated end on the
	// next 429; only then does Stripe come back.
	time.Sleep(3 * time.Second)
	s.Sims.Stripe.ClearFaults()
	code, out, errOut := runStarter(t, "redrive", "--state", "claimed", "--dry-run")
	if _, sum := bulkLines(t, out); code != exitOK || sum.Selected != n {
		t.Fatalf("dry run: exit %d, %+v, %s", code, sum, errOut)
	}
	code, out, errOut = runStarter(t, "redrive", "--state", "claimed", "--rate", "100")
	rows, sum := bulkLines(t, out)
	if code != exitOK || sum.Done != n || sum.ByResult["done"] != n {
		t.Fatalf("bulk redrive: exit %d, rows %+v, summary %+v, stderr %s", code, rows, sum, errOut)
	}
	t.Logf("bulk redrive of %d terminated runs at --rate 100: %.1f rows/s (%s)", n, sum.Rate, sum.Elapsed)
	for _, id := range ids {
		st, err := workflowResult(t, s, id)
		if err != nil || st.Outcome != workflows.OutcomeCompleted {
			t.Errorf("%s: %+v, %v", id, st, err)
		}
		if c := s.Sims.Stripe.Stats().ChargesByMessage[id]; c != 1 {
			t.Errorf("%s charged %d times, want 1", id, c)
		}
		if m := s.Sims.SendGrid.Stats().DeliveriesByKey["email:"+id]; m != 1 {
			t.Errorf("%s: %d receipts, want 1", id, m)
		}
	}
	// Again: every run is completed now, each row refused.
	code, out, _ = runStarter(t, "redrive", "--state", "succeeded", "--rate", "100")
	if _, sum := bulkLines(t, out); code != exitRefused || sum.ByResult["refused"] != n {
		t.Errorf("second bulk redrive: exit %d, %+v; want every row refused", code, sum)
	}
}

// TestBulkStopsBetweenRowsOnSignal: a cancelled context (SIGINT) stops a
// bulk run between rows; it names the cursor, and the run given it goes on
// with the rows not done, none twice.
func TestBulkStopsBetweenRowsOnSignal(t *testing.T) {
	f := newOpsFixture(t)
	ids := f.processing(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1200*time.Millisecond, cancel) // during the wait after the second row
	var stdout, stderr strings.Builder
	code := run(ctx, []string{"resolve", "--state", "processing", "--rate", "1"}, nil, &stdout, &stderr)
	rows, sum := bulkLines(t, stdout.String())
	if code != exitError || !sum.Stopped || len(rows) != 2 || sum.GoOn != "--after order-placed/"+ids[1] {
		t.Fatalf("interrupted run: exit %d, rows %+v, summary %+v, stderr %s; want 2 rows and --after order-placed/%s", code, rows, sum, stderr.String(), ids[1])
	}
	code, out, errOut := runStarter(t, "resolve", "--state", "processing", "--rate", "50", "--after", "order-placed/"+ids[1])
	rows, sum = bulkLines(t, out)
	if len(rows) != 2 || rows[0].MessageID != ids[2] || rows[1].MessageID != ids[3] || sum.Stopped {
		t.Fatalf("resumed run: exit %d, rows %+v, summary %+v, stderr %s; want %s and %s", code, rows, sum, errOut, ids[2], ids[3])
	}
}
