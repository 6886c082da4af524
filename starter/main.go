// Command starter is effectively's command line: it sends messages (one
// workflow per message, copies reported as duplicates), shows what happened
// to a message, and lists and re-drives quarantined messages.
//
//	starter send FILE|-              start one workflow per message (a JSON object or JSON lines)
//	starter publish FILE|-           put each message on the JetStream subject the worker consumes
//	starter status MESSAGE_ID        print the recorded outcome of a message as JSON
//	starter quarantine list          list quarantined messages as JSON lines
//	starter quarantine retry ID      send a quarantined message again
//
// Output is one JSON line per message on stdout; logs and the summary go to
// stderr. Exit codes:
//
//	0  every message was started or recognised as a duplicate
//	1  an error stopped the command (Postgres or Temporal unreachable, …);
//	   messages already reported are settled, the rest were not sent
//	2  usage error
//	3  send: at least one message was invalid (each is quarantined with its reason);
//	   publish: at least one message was invalid (published; the worker quarantines it)
//	4  status: no record of that message
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  starter send FILE|-              start one workflow per message (JSON object or JSON lines)
  starter publish FILE|-           put each message on the JetStream subject the worker consumes
  starter status [-consumer NAME] MESSAGE_ID
                                   print the recorded outcome of a message as JSON
  starter quarantine list [-limit N]
  starter quarantine retry ID      send a quarantined message again

environment: DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, EFFECTIVELY_TASK_QUEUE, LOG_LEVEL;
publish: NATS_URL, NATS_STREAM, NATS_SUBJECT
`

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitInvalid  = 3
	exitNotFound = 4
)

// errUsage marks a usage error.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel()}))
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var (
		code int
		err  error
	)
	switch args[0] {
	case "send":
		code, err = cmdSend(ctx, args[1:], stdin, stdout, stderr, logger)
	case "publish":
		code, err = cmdPublish(ctx, args[1:], stdin, stdout, stderr, logger)
	case "status":
		code, err = cmdStatus(ctx, args[1:], stdout, logger)
	case "quarantine":
		code, err = cmdQuarantine(ctx, args[1:], stdout, logger)
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
	if err != nil {
		fmt.Fprintf(stderr, "starter: %v\n", err)
		return exitError
	}
	return code
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("LOG_LEVEL"))); err != nil {
		return slog.LevelWarn
	}
	return l
}
