package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
)

// cmdAnomalies lists the payment anomalies (contradictions a Stripe event
// reported against the ledger, kept for an operator) or marks one resolved
// with the operator's reason:
//
//	starter anomalies list [-all] [-limit N]
//	starter anomalies resolve EVENT_ID -reason "…"
//
// Resolving records the decision only; the refund or redrive it calls for
// is the operator's (docs/runbook.md).
func cmdAnomalies(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	if len(args) == 0 {
		return exitUsage, fmt.Errorf("%w: anomalies takes list or resolve EVENT_ID -reason TEXT", errUsage)
	}
	switch args[0] {
	case "list":
		fs := flag.NewFlagSet("anomalies list", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		all := fs.Bool("all", false, "list resolved anomalies too")
		limit := fs.Int("limit", 100, "how many, oldest first")
		if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 || *limit < 1 {
			return exitUsage, fmt.Errorf("%w: anomalies list takes [-all] [-limit N > 0]", errUsage)
		}
		d, err := connect(ctx, cfg, logger, false)
		if err != nil {
			return exitError, err
		}
		defer d.close()
		as, err := d.store.PaymentAnomalies(ctx, *all, *limit)
		if err != nil {
			return exitError, err
		}
		return jsonLines(stdout, as)
	case "resolve":
		id, reason, err := resolveArgs(args[1:])
		if err != nil {
			return exitUsage, err
		}
		d, err := connect(ctx, cfg, logger, false)
		if err != nil {
			return exitError, err
		}
		defer d.close()
		a, err := d.store.ResolvePaymentAnomaly(ctx, id, reason)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return exitNotFound, fmt.Errorf("no payment anomaly of event %s", id)
		case errors.Is(err, store.ErrResolved):
			_ = json.NewEncoder(stdout).Encode(a)
			return exitRefused, fmt.Errorf("refused: %w (nothing was changed)", err)
		case err != nil:
			return exitError, err
		}
		logger.Info("payment anomaly resolved", "event_id", a.EventID, "message_id", a.MessageID)
		if err := json.NewEncoder(stdout).Encode(a); err != nil {
			return exitError, err
		}
		return exitOK, nil
	}
	return exitUsage, fmt.Errorf("%w: anomalies takes list or resolve, not %q", errUsage, args[0])
}

// resolveArgs parses EVENT_ID and -reason, in either order. Errors wrap
// errUsage.
func resolveArgs(args []string) (id, reason string, err error) {
	fs := flag.NewFlagSet("anomalies resolve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := fs.String("reason", "", "why the anomaly is resolved: what was done (kept with it)")
	if err := fs.Parse(args); err != nil {
		return "", "", fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", "", fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	if id == "" || fs.NArg() != 0 || strings.TrimSpace(*r) == "" {
		return "", "", fmt.Errorf("%w: anomalies resolve takes one EVENT_ID and a non-empty -reason", errUsage)
	}
	return id, *r, nil
}
