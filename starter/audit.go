package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/config"
)

// exitFindings: the audit found at least one difference (each printed as
// a JSON line, and kept in audit_findings).
const exitFindings = 8

// cmdAudit audits a window of creation times against Stripe and SendGrid
// (internal/adapter/audit), without touching the schedule's checkpoint:
// one JSON line per finding on stdout, the report on stderr.
func cmdAudit(ctx context.Context, cfg config.Config, args []string, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	now := time.Now()
	since := fs.String("since", "24h", "start of the window: RFC 3339, or a duration before now")
	until := fs.String("until", "0s", "end of the window (exclusive): RFC 3339, or a duration before now")
	maxReq := fs.Int("max-requests", cfg.AuditMaxRequests, "Stripe requests this run may make")
	receipts := fs.Bool("receipts", cfg.Webhooks.SendGridPublicKey != "", "compare receipts with SendGrid's events (default: when the Event Webhook is configured)")
	bound := fs.Duration("event-bound", audit.DefaultEventBound, "how long a receipt may wait for its first SendGrid event")
	if err := fs.Parse(args); err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	from, err := whenFlag("since", *since, now)
	if err != nil {
		return exitUsage, err
	}
	to, err := whenFlag("until", *until, now)
	if err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 0 || !to.After(from) || *maxReq < 1 || *bound <= 0 {
		return exitUsage, fmt.Errorf("%w: audit takes --since and --until (since before until), --max-requests N ≥ 1, --event-bound > 0", errUsage)
	}
	pay, err := stripeClient(cfg, logger)
	if err != nil {
		return exitError, err
	}
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	a, err := audit.New(d.store, pay, audit.Config{MaxRequests: *maxReq, Receipts: *receipts, EventBound: *bound})
	if err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	rep, runErr := a.Window(ctx, from, to)
	enc := json.NewEncoder(stdout)
	for _, f := range rep.Findings {
		if err := enc.Encode(f); err != nil {
			return exitError, err
		}
	}
	_ = json.NewEncoder(stderr).Encode(rep)
	switch {
	case errors.Is(runErr, audit.ErrBudget):
		return exitError, fmt.Errorf("%w: audited until %s; go on with --since %s", runErr,
			rep.AuditedUntil.Format(time.RFC3339), rep.AuditedUntil.Format(time.RFC3339))
	case runErr != nil:
		return exitError, runErr
	case rep.Found > 0:
		return exitFindings, nil
	}
	return exitOK, nil
}

// whenFlag reads a time flag: RFC 3339, or a duration before now.
func whenFlag(name, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%w: --%s %q: want an RFC 3339 time or a duration before now (24h)", errUsage, name, v)
	}
	return now.Add(-d), nil
}
