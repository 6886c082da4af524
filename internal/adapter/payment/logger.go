package payment

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/stripe/stripe-go/v76"
)

// newLeveledLogger adapts logger to stripe-go's logging interface, or
// silences stripe-go when logger is nil. Lines containing apiKey have it
// redacted.
func newLeveledLogger(logger *slog.Logger, apiKey string) stripe.LeveledLoggerInterface {
	if logger == nil {
		return &stripe.LeveledLogger{Level: stripe.LevelNull}
	}
	return slogLogger{l: logger.With(slog.String("component", "stripe-go")), apiKey: apiKey}
}

// slogLogger is a stripe.LeveledLoggerInterface writing to slog.
type slogLogger struct {
	l      *slog.Logger
	apiKey string
}

// Debugf drops stripe-go's debug lines: they carry whole response bodies.
func (slogLogger) Debugf(string, ...any) {}

// Infof logs stripe-go's request and retry lines at debug level.
func (s slogLogger) Infof(format string, v ...any) { s.log(slog.LevelDebug, format, v) }

// Warnf logs at warn level.
func (s slogLogger) Warnf(format string, v ...any) { s.log(slog.LevelWarn, format, v) }

// Errorf logs at error level.
func (s slogLogger) Errorf(format string, v ...any) { s.log(slog.LevelError, format, v) }

func (s slogLogger) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if s.l.Enabled(ctx, level) {
		msg := fmt.Sprintf(format, v...)
		if s.apiKey != "" {
			msg = strings.ReplaceAll(msg, s.apiKey, "[REDACTED]")
		}
		s.l.Log(ctx, level, msg)
	}
}
