package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// chargeOutside charges message id's order again outside effectively, with
// the message's metadata, as a charge in the dashboard would.
func (f *opsFixture) chargeOutside(t *testing.T, id string, order int64) {
	t.Helper()
	if _, err := f.sims.PaymentClient(t).Charge(context.Background(), payment.ChargeRequest{
		IdempotencyKey: "dashboard-" + id, MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", PaymentMethod: "pm_card_visa",
	}); err != nil {
		t.Fatal(err)
	}
}

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
	f.chargeOutside(t, "evt_audit_paid", 1)
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

// openFindingsGauge is effectively_audit_findings_open{kind} as a scrape
// of the worker's /metrics reads it.
func openFindingsGauge(t *testing.T, reg *prometheus.Registry, kind store.FindingKind) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameAuditFindings {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == string(kind) {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{kind=%q} in the scrape", metrics.NameAuditFindings, kind)
	return 0
}

// TestAuditListAndResolve: an operator lists the findings kept, marks one
// resolved with a reason that is kept, and the open-findings gauge drops;
// no reason, an unknown kind or an unknown finding is refused; resolving
// it again changes nothing and says so; a later audit that finds it again
// prints it resolved and exits 0.
func TestAuditListAndResolve(t *testing.T) {
	f := newOpsFixture(t)
	reg := prometheus.NewRegistry()
	metrics.RegisterBacklog(reg, f.db, 0, nil)
	if _, err := f.charge(t, "evt_res_paid", 7, "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	f.chargeOutside(t, "evt_res_paid", 7)
	if code, _, errOut := runStarter(t, "audit", "--since", "10m"); code != exitFindings {
		t.Fatalf("audit: exit %d, %s; want 8", code, errOut)
	}
	const object = "message:evt_res_paid"
	code, out, errOut := runStarter(t, "audit", "list")
	if code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"object":"`+object+`"`) || strings.Contains(out, "resolved_at") {
		t.Fatalf("list: exit %d, %q, %s; want the open duplicate_charge", code, out, errOut)
	}
	if code, out, _ := runStarter(t, "audit", "list", "--kind", string(store.FindingAmountMismatch)); code != exitOK || out != "" {
		t.Errorf("list --kind amount_mismatch: exit %d, %q; want nothing", code, out)
	}
	if code, _, _ := runStarter(t, "audit", "list", "--kind", "bogus"); code != exitUsage {
		t.Errorf("list --kind bogus: exit %d, want 2", code)
	}
	if g := openFindingsGauge(t, reg, store.FindingDuplicateCharge); g != 1 {
		t.Fatalf("gauge before resolve = %v, want 1", g)
	}

	kind := string(store.FindingDuplicateCharge)
	for _, args := range [][]string{
		{kind, object},                     // no reason
		{kind, object, "--reason", "  "},   // a blank one
		{kind, "--reason", "refunded"},     // no object
		{"bogus", object, "--reason", "x"}, // no such kind
		{kind, object, "extra", "--reason", "x"},
	} {
		if code, _, errOut := runStarter(t, append([]string{"audit", "resolve"}, args...)...); code != exitUsage {
			t.Errorf("audit resolve %q: exit %d, %s; want 2", args, code, errOut)
		}
	}
	if code, _, errOut := runStarter(t, "audit", "resolve", string(store.FindingAmountMismatch), object, "--reason", "x"); code != exitNotFound || !strings.Contains(errOut, "no audit finding amount_mismatch of "+object) {
		t.Errorf("resolve of no finding: exit %d, %s; want 4 naming it", code, errOut)
	}

	const reason = "second charge refunded in the dashboard (ticket 42)"
	code, out, errOut = runStarter(t, "audit", "resolve", "--reason", reason, kind, object)
	var got store.Finding
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != exitOK || got.Resolution != reason || got.ResolvedAt == nil || got.Object != object {
		t.Fatalf("resolve: exit %d, %q, %s", code, out, errOut)
	}
	if g := openFindingsGauge(t, reg, store.FindingDuplicateCharge); g != 0 {
		t.Errorf("gauge after resolve = %v, want 0", g)
	}
	code, out, errOut = runStarter(t, "audit", "resolve", kind, object, "--reason", "again")
	var again store.Finding
	if err := json.Unmarshal([]byte(out), &again); err != nil || code != exitOK || again.Resolution != reason || !again.ResolvedAt.Equal(*got.ResolvedAt) ||
		!strings.Contains(errOut, "resolved before") || !strings.Contains(errOut, "nothing changed") {
		t.Errorf("resolve again: exit %d, %q, %s; want 0, the first resolution kept, and saying so", code, out, errOut)
	}
	if code, out, _ := runStarter(t, "audit", "list"); code != exitOK || out != "" {
		t.Errorf("list after resolve: exit %d, %q; want nothing open", code, out)
	}
	if code, out, _ := runStarter(t, "audit", "list", "--all"); code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, "ticket 42") {
		t.Errorf("list --all: exit %d, %q; want the resolved finding with its reason", code, out)
	}
	// The audit finds it again (both PaymentIntents still succeeded): it
	// stays resolved, and the run exits 0.
	code, out, errOut = runStarter(t, "audit", "--since", "10m")
	if code != exitOK || !strings.Contains(out, `"resolution":"`+reason+`"`) || !strings.Contains(errOut, `"resolved_findings":1`) {
		t.Errorf("audit after resolve: exit %d, %q, %s; want 0 and the finding printed resolved", code, out, errOut)
	}
	if g := openFindingsGauge(t, reg, store.FindingDuplicateCharge); g != 0 {
		t.Errorf("gauge after the audit found it again = %v, want 0", g)
	}
}
