package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
)

// exitFindings: the audit found at least one difference not resolved by
// an operator (each finding printed as a JSON line, and kept in
// audit_findings).
const exitFindings = 8

// cmdAudit audits a window of creation times against Stripe and SendGrid
// (internal/adapter/audit), without touching the schedule's checkpoint:
// one JSON line per finding on stdout, the report on stderr. `audit list`
// and `audit resolve` read and settle the findings kept.
func cmdAudit(ctx context.Context, cfg config.Config, args []string, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return cmdAuditList(ctx, cfg, args[1:], stdout, logger)
		case "resolve":
			return cmdAuditResolve(ctx, cfg, args[1:], stdout, stderr, logger)
		}
	}
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
	case rep.Found > rep.Resolved:
		return exitFindings, nil
	}
	return exitOK, nil
}

// cmdAuditList prints the findings kept in audit_findings, oldest first,
// as JSON lines: the open ones, or all with --all.
//
//	starter audit list [--all] [--kind KIND] [--limit N]
func cmdAuditList(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	fs := flag.NewFlagSet("audit list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	all := fs.Bool("all", false, "list resolved findings too")
	kind := fs.String("kind", "", "only findings of this kind")
	limit := fs.Int("limit", 100, "how many, oldest first")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *limit < 1 {
		return exitUsage, fmt.Errorf("%w: audit list takes [--all] [--kind KIND] [--limit N > 0]", errUsage)
	}
	k, err := findingKind(*kind)
	if err != nil {
		return exitUsage, err
	}
	return withStore(ctx, cfg, logger, func(st *store.Store) (int, error) {
		fds, err := st.Findings(ctx, store.FindingFilter{Kind: k, All: *all, Limit: *limit})
		if err != nil {
			return exitError, err
		}
		return jsonLines(stdout, fds)
	})
}

// cmdAuditResolve marks a finding resolved with the operator's reason,
// once the difference is settled (docs/runbook.md, per kind). It records
// the decision only. Resolving it again changes nothing and says so: the
// first resolution stands.
//
//	starter audit resolve KIND OBJECT --reason "…"
func cmdAuditResolve(ctx context.Context, cfg config.Config, args []string, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	pos, reason, err := reasonArgs("audit resolve takes KIND OBJECT and a non-empty --reason", 2, args)
	if err != nil {
		return exitUsage, err
	}
	kind, err := findingKind(pos[0])
	if err != nil {
		return exitUsage, err
	}
	return withStore(ctx, cfg, logger, func(st *store.Store) (int, error) {
		f, err := st.ResolveFinding(ctx, kind, pos[1], reason)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return exitNotFound, fmt.Errorf("no audit finding %s of %s (starter audit list --all lists them)", kind, pos[1])
		case errors.Is(err, store.ErrResolved):
			fmt.Fprintf(stderr, "starter: audit finding %s of %s was resolved before, at %s (%q): nothing changed\n",
				kind, pos[1], f.ResolvedAt.UTC().Format(time.RFC3339), f.Resolution)
		case err != nil:
			return exitError, err
		default:
			logger.Info("audit finding resolved", "kind", string(f.Kind), "object", f.Object)
		}
		if err := json.NewEncoder(stdout).Encode(f); err != nil {
			return exitError, err
		}
		return exitOK, nil
	})
}

// findingKind reads a --kind or KIND argument: "" or one of
// store.FindingKinds.
func findingKind(s string) (store.FindingKind, error) {
	k := store.FindingKind(s)
	if s != "" && !slices.Contains(store.FindingKinds, k) {
		return "", fmt.Errorf("%w: finding kind %q: want one of %v", errUsage, s, store.FindingKinds)
	}
	return k, nil
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
