package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/message"
)

// cmdSend starts one workflow per message of a file or stdin.
func cmdSend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	if len(args) != 1 {
		return exitUsage, fmt.Errorf("%w: send takes one argument, a file or -", errUsage)
	}
	var (
		r    io.Reader = stdin
		size int64     = -1
	)
	if args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return exitError, fmt.Errorf("open messages: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		r = f
	}
	d, err := connect(ctx, logger, true)
	if err != nil {
		return exitError, err
	}
	defer d.close()

	var bar *progressbar.ProgressBar
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) && size > 0 {
		bar = progressbar.DefaultBytes(size, "sending")
		r = io.TeeReader(r, bar)
	}
	counts := map[string]int{}
	enc := json.NewEncoder(stdout)
	err = message.DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		var (
			res intake.Result
			err error
		)
		if derr != nil {
			res, err = d.intake.Accept(ctx, raw, "starter")
		} else {
			res, err = d.intake.AcceptMessage(ctx, m, "starter")
		}
		if err != nil {
			return fmt.Errorf("message at line %d: %w", line, err)
		}
		counts[res.Status]++
		return enc.Encode(res)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(stderr, "sent %d messages: %d started, %d duplicate, %d invalid\n",
		counts[intake.StatusStarted]+counts[intake.StatusDuplicate]+counts[intake.StatusInvalid],
		counts[intake.StatusStarted], counts[intake.StatusDuplicate], counts[intake.StatusInvalid])
	if err != nil {
		return exitError, err
	}
	if counts[intake.StatusInvalid] > 0 {
		return exitInvalid, nil
	}
	return exitOK, nil
}
