// Command devstack runs effectively's whole local stack with one command
// (`make run`): it builds the Temporal CLI dev server if it is missing, finds
// or starts Postgres, starts the dev server (with the UI and the search
// attributes registered), the Stripe and SendGrid simulators and the worker,
// sends the example messages, prints what happened to each, and keeps
// everything running until Ctrl-C.
//
//	go run ./tools/devstack [-examples examples/orders.jsonl] [-exit] [-keep]
//
// -exit stops after the report (for scripts and tests); -keep keeps the
// previous run's database and Temporal state instead of starting fresh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	var o options
	flag.StringVar(&o.examples, "examples", "examples/orders.jsonl", "messages to send once the stack is up")
	flag.BoolVar(&o.exit, "exit", false, "stop after sending the examples and printing the report")
	flag.BoolVar(&o.keep, "keep", false, "keep the previous run's database and Temporal state")
	flag.StringVar(&o.stateDir, "state", ".devstack", "folder for binaries, logs and state")
	flag.StringVar(&o.instance, "instance", "dev", "names the database (effectively_dev) and the JetStream streams (EFFECTIVELY_DEV)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "\ndevstack: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	examples string
	exit     bool
	keep     bool
	stateDir string // relative to the repository, or absolute
	instance string // a-z 0-9: the database effectively_<instance>, the streams EFFECTIVELY_<INSTANCE>
}

// findRoot returns the folder holding go.mod, at or above the working one.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run devstack from inside the effectively repository (no go.mod found)")
		}
		dir = parent
	}
}

// step prints one line of progress.
func step(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "==> "+format+"\n", args...)
}
