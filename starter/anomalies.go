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
		return withStore(ctx, cfg, logger, func(st *store.Store) (int, error) {
			as, err := st.PaymentAnomalies(ctx, *all, *limit)
			if err != nil {
				return exitError, err
			}
			return jsonLines(stdout, as)
		})
	case "resolve":
		id, reason, err := resolveArgs(args[1:])
		if err != nil {
			return exitUsage, err
		}
		return withStore(ctx, cfg, logger, func(st *store.Store) (int, error) {
			a, err := st.ResolvePaymentAnomaly(ctx, id, reason)
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
		})
	}
	return exitUsage, fmt.Errorf("%w: anomalies takes list or resolve, not %q", errUsage, args[0])
}

// resolveArgs parses EVENT_ID and -reason, in either order. Errors wrap
// errUsage.
func resolveArgs(args []string) (id, reason string, err error) {
	pos, reason, err := reasonArgs("anomalies resolve takes one EVENT_ID and a non-empty -reason", 1, args)
	if err != nil {
		return "", "", err
	}
	return pos[0], reason, nil
}

// reasonArgs parses n positional arguments and -reason, in any order;
// want is the usage error's text. Errors wrap errUsage.
func reasonArgs(want string, n int, args []string) (pos []string, reason string, err error) {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := fs.String("reason", "", "why it is resolved: what was done (kept with it)")
	for {
		if err := fs.Parse(args); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != n || slices.Contains(pos, "") || strings.TrimSpace(*r) == "" {
		return nil, "", fmt.Errorf("%w: %s", errUsage, want)
	}
	return pos, *r, nil
}
