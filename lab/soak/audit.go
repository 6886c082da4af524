package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/workerproc"
)

// auditRun audits the run's window against the simulators
// (internal/adapter/audit): a clean soak has no finding. It also checks
// that the audit saw every charge, so that an empty report is not the
// audit of nothing.
func auditRun(ctx context.Context, st Stack, start time.Time, rep *Report) error {
	pay, err := payment.New(payment.Config{APIKey: workerproc.FakeStripeKey, BaseURL: st.Worker.StripeURL, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	a, err := audit.New(store.New(st.Pool), pay, audit.Config{
		MaxRequests: 100000, Receipts: rep.Webhooks != nil, EventBound: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	ar, err := a.Window(ctx, start.Add(-time.Minute), time.Now().Add(time.Minute))
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	rep.Audit = &ar
	for _, f := range ar.Findings {
		rep.Violations = append(rep.Violations, fmt.Sprintf("audit: %s %s: %s", f.Kind, f.Object, f.Detail))
	}
	if ar.Listed < st.Stripe.Stats().Charges {
		rep.Violations = append(rep.Violations, fmt.Sprintf("audit listed %d payment intents, fewer than the %d charges", ar.Listed, st.Stripe.Stats().Charges))
	}
	return nil
}
