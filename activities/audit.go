package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/audit"
)

// AuditLedgerName is the activity type of AuditLedger. Running histories
// refer to it: never rename it.
const AuditLedgerName = "AuditLedger"

func init() { register(AuditLedgerName, func(a *Activities) any { return a.AuditLedger }) }

// ErrTypeAuditOff is the error type of an AuditLedger run on a worker
// without an Auditor.
const ErrTypeAuditOff = "AuditOff"

// AuditInput is the input of AuditLedger.
type AuditInput struct {
	// Checkpoint names the checkpoint the audit resumes from.
	Checkpoint string `json:"checkpoint"`
}

// AuditResult is what one AuditLedger run did; findings are in
// audit_findings, counted here by kind.
type AuditResult struct {
	audit.Report
	// ByKind counts this run's findings by kind.
	ByKind map[string]int `json:"by_kind,omitempty"`
}

// AuditLedger audits the ledger against Stripe and SendGrid from the
// checkpoint on (audit.Auditor.Resume). A run that spent its Stripe
// request budget succeeds with Complete false: the next scheduled run goes
// on from the checkpoint. Safe to retry: findings are kept once per (kind,
// object).
func (a *Activities) AuditLedger(ctx context.Context, in AuditInput) (AuditResult, error) {
	if a.Auditor == nil {
		return AuditResult{}, temporal.NewNonRetryableApplicationError("this worker has no auditor (STRIPE_API_KEY unset?)", ErrTypeAuditOff, nil)
	}
	rep, err := a.Auditor.Resume(ctx, in.Checkpoint)
	res := AuditResult{Report: rep, ByKind: map[string]int{}}
	for _, f := range rep.Findings {
		res.ByKind[string(f.Kind)]++
		if f.New {
			activity.GetLogger(ctx).Warn("audit finding", "kind", string(f.Kind), "object", f.Object, "detail", f.Detail)
		}
	}
	if errors.Is(err, audit.ErrBudget) {
		activity.GetLogger(ctx).Info("audit budget spent; the next run goes on", "audited_until", rep.AuditedUntil, "requests", rep.Requests)
		return res, nil
	}
	return res, err
}
