package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
)

// Bulk operator commands: `redrive`, `resolve` and `quarantine retry` with
// a filter instead of an ID. Each selected row goes through the very
// command an operator would run for it alone (cmdRedrive, cmdResolve,
// cmdQuarantine retry), so a bulk run refuses exactly what one-by-one runs
// refuse, and derives every key the same way: nothing new is minted.
//
//	--dry-run            print the count and the first rows; change nothing
//	--rate N             rows per second (default 5)
//	--max N              stop after N rows (a stopped run prints where to go on)
//	--after CURSOR       go on after the row a stopped run named
//
// Rows are taken in a fixed order ((consumer, message ID), or the
// quarantine ID), so --after resumes exactly; SIGINT stops between rows.

// bulkFlagNames are the flags that make a command a bulk one.
var bulkFlagNames = []string{"state", "reason", "consumer", "since", "until", "finding", "dry-run", "rate", "max", "after", "show"}

// isBulk reports whether args ask for a bulk run: a filter flag and no ID.
func isBulk(args []string) bool {
	positional := 0
	filter := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional++
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if slices.Contains(bulkFlagNames, name) && name != "consumer" {
			filter = true
		}
		if !hasValue && name != "dry-run" && i+1 < len(args) {
			i++ // the flag's value
		}
	}
	return filter && positional == 0
}

// bulkRow is one row's line on stdout.
type bulkRow struct {
	Cursor    string `json:"cursor"`
	Consumer  string `json:"consumer,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	// QuarantineID and QuarantineReason are the row of a quarantine retry.
	QuarantineID     int64  `json:"quarantine_id,omitempty"`
	QuarantineReason string `json:"quarantine_reason,omitempty"`
	// Result: done, refused, not_found, still_open, invalid or error; Exit
	// is what the one-row command exited with.
	Result string `json:"result,omitempty"`
	Exit   int    `json:"exit"`
	// Reason says why a row was not done.
	Reason string          `json:"reason,omitempty"`
	Report json.RawMessage `json:"report,omitempty"`
}

// bulkSummary is the last line on stdout.
type bulkSummary struct {
	Command  string         `json:"command"`
	DryRun   bool           `json:"dry_run,omitempty"`
	Selected int            `json:"selected"`
	Done     int            `json:"done"`
	ByResult map[string]int `json:"by_result"`
	// Stopped reports a run that ended before its last row (--max, SIGINT,
	// an error); GoOn is the flag that resumes it.
	Stopped bool    `json:"stopped,omitempty"`
	GoOn    string  `json:"go_on,omitempty"`
	Elapsed string  `json:"elapsed"`
	Rate    float64 `json:"rows_per_second"`
	// First is, for a dry run, the first rows selected.
	First []bulkRow `json:"first,omitempty"`
}

type bulkOptions struct {
	state, reason, consumer, finding, after string
	since, until                            time.Time
	dryRun                                  bool
	rate                                    float64
	max, show                               int
}

func parseBulk(name string, args []string) (bulkOptions, error) {
	var o bulkOptions
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.state, "state", "", "payment states, comma-separated")
	fs.StringVar(&o.reason, "reason", "", "quarantine reason")
	fs.StringVar(&o.consumer, "consumer", "", "consumer")
	fs.StringVar(&o.finding, "finding", "", "audit finding kind: messages with an open finding of it")
	since := fs.String("since", "", "rows from this time on: RFC 3339 or a duration before now")
	until := fs.String("until", "", "rows before this time")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the count and the first rows, change nothing")
	fs.Float64Var(&o.rate, "rate", 5, "rows per second")
	fs.IntVar(&o.max, "max", 0, "stop after this many rows (0: all)")
	fs.StringVar(&o.after, "after", "", "go on after this cursor (printed by a stopped run)")
	fs.IntVar(&o.show, "show", 20, "rows a dry run prints")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("%w: %s takes one ID or a filter, not both", errUsage, name)
	}
	now := time.Now()
	var err error
	if *since != "" {
		if o.since, err = whenFlag("since", *since, now); err != nil {
			return o, err
		}
	}
	if *until != "" {
		if o.until, err = whenFlag("until", *until, now); err != nil {
			return o, err
		}
	}
	switch {
	case o.rate <= 0:
		return o, fmt.Errorf("%w: --rate must be positive", errUsage)
	case o.max < 0 || o.show < 0:
		return o, fmt.Errorf("%w: --max and --show must not be negative", errUsage)
	case o.finding != "" && !slices.Contains(store.FindingKinds, store.FindingKind(o.finding)):
		return o, fmt.Errorf("%w: --finding %q: want one of %v", errUsage, o.finding, store.FindingKinds)
	}
	for _, st := range splitList(o.state) {
		if !slices.Contains(allPaymentStates, store.PaymentState(st)) {
			return o, fmt.Errorf("%w: --state %q: want payment states among %v", errUsage, st, allPaymentStates)
		}
	}
	return o, nil
}

var allPaymentStates = []store.PaymentState{store.PaymentClaimed, store.PaymentProcessing, store.PaymentSucceeded,
	store.PaymentFailed, store.PaymentUnknown, store.PaymentUnexpected}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// resultOf names a one-row command's exit code.
func resultOf(code int) string {
	switch code {
	case exitOK:
		return "done"
	case exitRefused:
		return "refused"
	case exitNotFound:
		return "not_found"
	case exitStillOpen:
		return "still_open"
	case exitInvalid:
		return "invalid"
	}
	return "error"
}

// cmdBulk runs command (redrive, resolve, retry) over the rows a filter
// selects.
func cmdBulk(ctx context.Context, cfg config.Config, command string, args []string, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	o, err := parseBulk(command, args)
	if err != nil {
		return exitUsage, err
	}
	if command == "retry" && (o.state != "" || o.finding != "") {
		return exitUsage, fmt.Errorf("%w: quarantine retry filters by --reason, --consumer, --since, --until", errUsage)
	}
	if command != "retry" && o.reason != "" {
		return exitUsage, fmt.Errorf("%w: %s filters by --state, --consumer, --since, --until, --finding (--reason is quarantine retry's)", errUsage, command)
	}
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	rows, err := selectRows(ctx, d.store, command, o)
	d.close()
	if err != nil {
		return exitUsage, err
	}
	sum := bulkSummary{Command: command, DryRun: o.dryRun, Selected: len(rows), ByResult: map[string]int{}}
	enc := json.NewEncoder(stdout)
	if o.dryRun {
		sum.First = rows[:min(len(rows), o.show)]
		return exitOK, enc.Encode(sum)
	}
	var bar *progressbar.ProgressBar
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.Default(int64(len(rows)), command)
	}
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
	defer tick.Stop()
	code := exitOK
	cursor := o.after // the last row done
	stop := func() { sum.Stopped, sum.GoOn = true, "--after "+cursor }
	for i := range rows {
		if o.max > 0 && i >= o.max || ctx.Err() != nil {
			stop()
			break
		}
		if i > 0 {
			select {
			case <-ctx.Done():
				stop()
			case <-tick.C:
			}
			if sum.Stopped {
				break
			}
		}
		r := &rows[i]
		var out bytes.Buffer
		var rowErr error
		switch command {
		case "redrive":
			r.Exit, rowErr = cmdRedrive(ctx, cfg, []string{"-consumer", r.Consumer, r.MessageID}, &out, logger)
		case "resolve":
			r.Exit, rowErr = cmdResolve(ctx, cfg, []string{"-consumer", r.Consumer, r.MessageID}, &out, logger)
		case "retry":
			r.Exit, rowErr = cmdQuarantine(ctx, cfg, []string{"retry", strconv.FormatInt(r.QuarantineID, 10)}, &out, logger)
		}
		if rowErr != nil && r.Exit == exitOK {
			r.Exit = exitError
		}
		r.Result = resultOf(r.Exit)
		if rowErr != nil {
			r.Reason = rowErr.Error()
		}
		if b := bytes.TrimSpace(out.Bytes()); json.Valid(b) && len(b) > 0 {
			r.Report = json.RawMessage(compactJSON(b))
		}
		sum.Done++
		sum.ByResult[r.Result]++
		cursor = r.Cursor
		if err := enc.Encode(r); err != nil {
			return exitError, err
		}
		if bar != nil {
			_ = bar.Add(1)
		}
		code = worseExit(code, r.Exit)
	}
	el := time.Since(start)
	sum.Elapsed = el.Round(time.Millisecond).String()
	if el > 0 {
		sum.Rate = float64(sum.Done) / el.Seconds()
	}
	if err := enc.Encode(sum); err != nil {
		return exitError, err
	}
	if sum.Stopped {
		return exitError, fmt.Errorf("stopped after %d of %d rows: go on with %s", sum.Done, sum.Selected, sum.GoOn)
	}
	return code, nil
}

// worseExit keeps the exit code that says most: an error over a refusal
// over the rest.
func worseExit(a, b int) int {
	rank := func(c int) int {
		switch c {
		case exitOK:
			return 0
		case exitError:
			return 3
		case exitRefused:
			return 2
		}
		return 1
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// selectRows reads the rows a bulk command acts on.
func selectRows(ctx context.Context, st *store.Store, command string, o bulkOptions) ([]bulkRow, error) {
	if command == "retry" {
		var after int64
		if o.after != "" {
			var err error
			if after, err = strconv.ParseInt(o.after, 10, 64); err != nil {
				return nil, fmt.Errorf("%w: --after %q: want a quarantine ID", errUsage, o.after)
			}
		}
		qs, err := st.SelectQuarantine(ctx, store.QuarantineFilter{Reason: o.reason, Consumer: o.consumer, Since: o.since, Until: o.until, AfterID: after})
		if err != nil {
			return nil, err
		}
		rows := make([]bulkRow, 0, len(qs))
		for _, q := range qs {
			rows = append(rows, bulkRow{Cursor: strconv.FormatInt(q.ID, 10), Consumer: q.Consumer, MessageID: q.MessageID, QuarantineID: q.ID, QuarantineReason: q.Reason})
		}
		return rows, nil
	}
	f := store.MessageFilter{FromPayments: command == "resolve", Consumer: o.consumer, Since: o.since, Until: o.until, Finding: store.FindingKind(o.finding)}
	for _, s := range splitList(o.state) {
		f.States = append(f.States, store.PaymentState(s))
	}
	if o.after != "" {
		c, id, ok := strings.Cut(o.after, "/")
		if !ok {
			return nil, fmt.Errorf("%w: --after %q: want CONSUMER/MESSAGE_ID", errUsage, o.after)
		}
		f.After = store.MessageRef{Consumer: c, MessageID: id}
	}
	ms, err := st.SelectMessages(ctx, f)
	if err != nil {
		return nil, err
	}
	rows := make([]bulkRow, 0, len(ms))
	for _, m := range ms {
		rows = append(rows, bulkRow{Cursor: m.Consumer + "/" + m.MessageID, Consumer: m.Consumer, MessageID: m.MessageID})
	}
	return rows, nil
}
