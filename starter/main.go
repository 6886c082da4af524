// Command starter is effectively's command line: it sends messages (one
// workflow per message, copies reported as duplicates), shows what happened
// to a message, lists and re-drives quarantined messages, and settles the
// open cases of docs/runbook.md.
//
//	starter send FILE|-              start one workflow per message (a JSON object or JSON lines)
//	starter publish [-broker B] FILE|-  put each message on the broker the worker consumes (default nats)
//	starter status MESSAGE_ID        print the recorded outcome of a message as JSON
//	starter quarantine list          list quarantined messages as JSON lines
//	starter quarantine retry ID      send a quarantined message again
//	starter payments --state S       list open payments (unknown, processing, unexpected) as JSON lines
//	starter resolve MESSAGE_ID       settle a payment, refund or receipt from the provider's record
//	starter redrive MESSAGE_ID       run a failed workflow again (refused while any effect may exist)
//	starter anomalies list           list open payment anomalies as JSON lines (-all: resolved too)
//	starter anomalies resolve EVENT_ID -reason TEXT
//	                                 mark an anomaly resolved, keeping the operator's reason
//	starter audit --since T --until T
//	                                 compare the ledger with Stripe's and SendGrid's records
//	starter audit list [--all] [--kind K] [--limit N]
//	                                 list the open audit findings as JSON lines (--all: resolved too)
//	starter audit resolve KIND OBJECT --reason TEXT
//	                                 mark a finding resolved, keeping the operator's reason
//
// Output is one JSON line per message on stdout; logs and the summary go to
// stderr. Exit codes:
//
//	0  every message was started or recognised as a duplicate
//	1  an error stopped the command (Postgres or Temporal unreachable, …);
//	   messages already reported are settled, the rest were not sent
//	2  usage error, or bad configuration
//	3  send: at least one message was invalid (each is quarantined with its reason);
//	   publish: at least one message was invalid (published; the worker quarantines it)
//	4  status: no record of that message; resolve: no payment, refund or
//	   receipt recorded, or no PaymentIntent exists at Stripe (nothing was
//	   charged); redrive: the message is not in the inbox; anomalies
//	   resolve, audit resolve: no such anomaly or finding
//	5  the database schema is missing or older than this starter expects:
//	   run `worker migrate` with the same DATABASE_URL (the starter never
//	   changes the schema, so status, payments and quarantine list work with
//	   a read-only role)
//	6  refused, nothing changed: resolve could not read Stripe, or found no
//	   refund while a run may still create one; redrive: an effect of the
//	   message may exist (run resolve first), or the last run is not failed;
//	   anomalies resolve: resolved before
//	7  resolve: still open: Stripe still reports the payment processing or
//	   unexpected, a refund found differs from the request, or SendGrid has
//	   reported no event for the receipt; the ledger records what was said
//	8  audit: at least one finding not resolved by an operator (each a JSON
//	   line; kept in audit_findings)
//
// Configuration comes from the environment, read by internal/config; see
// docs/configuration.md. See docs/runbook.md for the open cases payments,
// resolve and redrive settle.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
)

const usage = `usage:
  starter send FILE|-              start one workflow per message (JSON object or JSON lines)
  starter publish [-broker nats|kafka|rabbitmq] FILE|-
                                   put each message on the broker the worker consumes (default nats)
  starter status [-consumer NAME] MESSAGE_ID
                                   print the recorded outcome of a message as JSON
  starter quarantine list [-limit N]
  starter quarantine retry ID      send a quarantined message again
  starter payments --state unknown|processing|unexpected [-limit N]
                                   list open payments as JSON lines
  starter resolve [-consumer NAME] MESSAGE_ID
                                   settle the message's payment, refund and receipt from the providers
  starter redrive [-consumer NAME] MESSAGE_ID
                                   run a failed workflow again (refused while any effect may exist)
  starter redrive|resolve FILTER [--dry-run] [--rate N] [--max N] [--after CURSOR]
  starter quarantine retry FILTER [--dry-run] [--rate N] [--max N] [--after CURSOR]
                                   the same for every row a filter selects, one by one, with the same
                                   refusals: --state S[,S] (payment states), --consumer C, --since T,
                                   --until T, --finding KIND (redrive, resolve), --reason R (quarantine);
                                   one JSON line per row, a summary last
  starter anomalies list [-all] [-limit N]
                                   payment anomalies (contradictions kept for an operator) as JSON lines
  starter anomalies resolve EVENT_ID -reason TEXT
                                   mark an anomaly resolved, keeping the reason
  starter audit [--since T] [--until T] [--max-requests N] [--receipts]
                                   compare the ledger with Stripe and SendGrid over a window (T: RFC 3339
                                   or a duration before now; default the last 24h); findings as JSON lines
  starter audit list [--all] [--kind KIND] [--limit N]
                                   the findings kept, open ones (--all: resolved too) as JSON lines
  starter audit resolve KIND OBJECT --reason TEXT
                                   mark a finding resolved once settled, keeping the reason (again: a no-op)

environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, EFFECTIVELY_TASK_QUEUE, LOG_LEVEL;
publish: NATS_URL, NATS_STREAM, NATS_SUBJECT; resolve: STRIPE_API_KEY, STRIPE_BASE_URL (see docs/configuration.md)
The starter never changes the schema: run "worker migrate" first (exit code 5 says so).
`

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitInvalid  = 3
	exitNotFound = 4
	exitSchema   = 5
	exitRefused  = 6
	// exitStillOpen: resolve read Stripe, which still reports the payment
	// processing or in an unexpected status.
	exitStillOpen = 7
)

// errUsage marks a usage error.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cfg, err := config.FromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "starter: bad configuration: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevelOr(slog.LevelWarn)}))
	var code int
	switch args[0] {
	case "send":
		code, err = cmdSend(ctx, cfg, args[1:], stdin, stdout, stderr, logger)
	case "publish":
		code, err = cmdPublish(ctx, cfg, args[1:], stdin, stdout, stderr, logger)
	case "status":
		code, err = cmdStatus(ctx, cfg, args[1:], stdout, logger)
	case "quarantine":
		// quarantine retry has no flag of its own: any flag is a filter.
		if len(args) > 2 && args[1] == "retry" && strings.HasPrefix(args[2], "-") {
			code, err = cmdBulk(ctx, cfg, "retry", args[2:], stdout, stderr, logger)
			break
		}
		code, err = cmdQuarantine(ctx, cfg, args[1:], stdout, logger)
	case "payments":
		code, err = cmdPayments(ctx, cfg, args[1:], stdout, logger)
	case "resolve", "redrive":
		switch {
		case isBulk(args[1:]):
			code, err = cmdBulk(ctx, cfg, args[0], args[1:], stdout, stderr, logger)
		case args[0] == "resolve":
			code, err = cmdResolve(ctx, cfg, args[1:], stdout, logger)
		default:
			code, err = cmdRedrive(ctx, cfg, args[1:], stdout, logger)
		}
	case "anomalies":
		code, err = cmdAnomalies(ctx, cfg, args[1:], stdout, logger)
	case "audit":
		code, err = cmdAudit(ctx, cfg, args[1:], stdout, stderr, logger)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "starter: %v\n%s", err, usage)
		return exitUsage
	}
	if errors.Is(err, store.ErrSchemaBehind) {
		fmt.Fprintf(stderr, "starter: %v\n", err)
		return exitSchema
	}
	if err != nil {
		fmt.Fprintf(stderr, "starter: %v\n", err)
		if code == exitOK {
			return exitError
		}
		return code
	}
	return code
}
