package activities

import "context"

// WithAttempt makes activities run under ctx see attempt n.
func WithAttempt(ctx context.Context, n int32) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// RequestHash exposes requestHash to tests.
func RequestHash(v any) string { return requestHash(v) }
