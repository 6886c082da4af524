package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
)

// cmdQuarantine lists quarantined messages or sends one again.
func cmdQuarantine(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	if len(args) == 0 {
		return exitUsage, fmt.Errorf("%w: quarantine takes list or retry ID", errUsage)
	}
	switch args[0] {
	case "list":
		fs := flag.NewFlagSet("quarantine list", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		limit := fs.Int("limit", 100, "how many entries, newest first")
		if err := fs.Parse(args[1:]); err != nil {
			return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
		}
		d, err := connect(ctx, cfg, logger, false)
		if err != nil {
			return exitError, err
		}
		defer d.close()
		entries, err := d.store.QuarantineList(ctx, *limit)
		if err != nil {
			return exitError, err
		}
		enc := json.NewEncoder(stdout)
		for _, e := range entries {
			line := struct {
				ID         int64  `json:"id"`
				Source     string `json:"source"`
				MessageID  string `json:"message_id,omitempty"`
				Reason     string `json:"reason"`
				Detail     string `json:"detail"`
				ReceivedAt string `json:"received_at"`
				RetryCount int    `json:"retry_count"`
				Copies     int    `json:"copies"`
				Size       int64  `json:"size"`
				SHA256     string `json:"raw_sha256"`
				Truncated  bool   `json:"truncated,omitempty"`
				Raw        string `json:"raw"`
			}{e.ID, e.Source, e.MessageID, e.Reason, e.Detail, e.ReceivedAt.UTC().Format("2006-01-02T15:04:05Z"), e.RetryCount, e.Copies, e.Size, e.SHA256, e.Truncated(), string(e.Raw)}
			if err := enc.Encode(line); err != nil {
				return exitError, err
			}
		}
		return exitOK, nil
	case "retry":
		if len(args) != 2 {
			return exitUsage, fmt.Errorf("%w: quarantine retry takes one ID", errUsage)
		}
		id, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return exitUsage, fmt.Errorf("%w: quarantine ID %q is not a number", errUsage, args[1])
		}
		d, err := connect(ctx, cfg, logger, false)
		if err != nil {
			return exitError, err
		}
		defer d.close()
		e, err := d.store.QuarantineGet(ctx, id)
		if err != nil {
			return exitError, err
		}
		if e.Truncated() {
			return exitError, fmt.Errorf("quarantine entry %d is a %d-byte message (%s) of which only the first %d bytes were kept: it cannot be sent again; send a corrected message from its source", id, e.Size, e.Reason, len(e.Raw))
		}
		if err := d.dialTemporal(ctx, cfg, logger); err != nil {
			return exitError, err
		}
		res, err := d.intake.Accept(ctx, e.Raw, "quarantine-retry")
		if err != nil {
			return exitError, err
		}
		if err := d.store.QuarantineMarkRetried(ctx, id); err != nil {
			return exitError, err
		}
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return exitError, err
		}
		if res.Status == intake.StatusInvalid {
			return exitInvalid, nil
		}
		return exitOK, nil
	default:
		return exitUsage, fmt.Errorf("%w: unknown quarantine command %q", errUsage, args[0])
	}
}
