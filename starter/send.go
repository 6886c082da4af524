package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
)

// cmdSend starts one workflow per message of a file or stdin.
func cmdSend(ctx context.Context, cfg config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	if len(args) != 1 {
		return exitUsage, fmt.Errorf("%w: send takes one argument, a file or -", errUsage)
	}
	r, size, closeInput, err := openInput(args[0], stdin)
	if err != nil {
		return exitError, err
	}
	defer closeInput()
	d, err := connect(ctx, cfg, logger, true)
	if err != nil {
		return exitError, err
	}
	defer d.close()

	bar, r := progress(r, size, stderr, "sending")
	counts := map[intake.Status]int{}
	enc := json.NewEncoder(stdout)
	err = d.intake.Routes().DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		var (
			res intake.Result
			err error
		)
		if derr != nil {
			res, err = d.intake.RejectInvalid(ctx, raw, "starter", derr)
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
