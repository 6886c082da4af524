package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// TestAuditCommand: `starter audit` prints each finding as a JSON line and
// exits 8; a rerun prints it again as not new and keeps one row; a window
// with nothing wrong exits 0.
func TestAuditCommand(t *testing.T) {
	f := newOpsFixture(t)
	if _, err := f.charge(t, "evt_audit_paid", 1, "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runStarter(t, "audit", "--since", "10m"); code != exitOK || out != "" || !strings.Contains(errOut, `"payment_intents_listed":1`) {
		t.Fatalf("clean audit: exit %d, stdout %q, stderr %s; want 0, nothing, the charge listed", code, out, errOut)
	}
	// A charge outside effectively, with the metadata of a message it
	// charged already.
	if _, err := f.sims.PaymentClient(t).Charge(context.Background(), payment.ChargeRequest{
		IdempotencyKey: "dashboard", MessageID: "evt_audit_paid", OrderID: 1, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
	}); err != nil {
		t.Fatal(err)
	}
	for i, wantNew := range []bool{true, false} {
		code, out, errOut := runStarter(t, "audit", "--since", "10m", "--until", "0s")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var got struct {
			store.Finding
			New bool `json:"new"`
		}
		if code != exitFindings || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &got) != nil {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %s; want 8 and one JSON line", i, code, out, errOut)
		}
		if got.Kind != store.FindingDuplicateCharge || got.Object != "message:evt_audit_paid" || got.New != wantNew || len(got.StripeIDs) != 2 {
			t.Errorf("run %d: finding %+v, want duplicate_charge of message:evt_audit_paid with both IDs, new=%v", i, got, wantNew)
		}
		if !strings.Contains(errOut, `"stripe_requests"`) {
			t.Errorf("run %d: stderr %q carries no report", i, errOut)
		}
	}
	if fs, err := f.db.Findings(context.Background(), store.FindingFilter{}); err != nil || len(fs) != 1 {
		t.Errorf("audit_findings: %+v, %v; want one row", fs, err)
	}
	// The bulk commands select the finding's message by its kind.
	code, out, errOut := runStarter(t, "resolve", "--finding", string(store.FindingDuplicateCharge), "--dry-run")
	if _, sum := bulkLines(t, out); code != exitOK || sum.Selected != 1 || sum.First[0].MessageID != "evt_audit_paid" {
		t.Errorf("resolve --finding duplicate_charge --dry-run: exit %d, %+v, %s; want evt_audit_paid", code, sum, errOut)
	}
	if code, out, _ := runStarter(t, "resolve", "--finding", string(store.FindingAmountMismatch), "--dry-run"); !strings.Contains(out, `"selected":0`) || code != exitOK {
		t.Errorf("resolve --finding amount_mismatch --dry-run: exit %d, %s; want nothing selected", code, out)
	}
	if code, _, _ := runStarter(t, "audit", "--since", "yesterday"); code != exitUsage {
		t.Errorf("bad --since: exit %d, want 2", code)
	}
}
