package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// stripeClass is what a failed Stripe call means to the effect protocol.
func stripeClass(err error) effect.Class {
	if pe, ok := errors.AsType[*payment.Error](err); ok &&
		(pe.HTTPStatus == http.StatusUnauthorized || pe.HTTPStatus == http.StatusForbidden) {
		return effect.ClassAlert
	}
	switch payment.Classify(err) {
	case payment.ClassDeclined, payment.ClassInvalid:
		return effect.ClassRefused
	case payment.ClassIdempotencyMismatch:
		return effect.ClassMismatch
	case payment.ClassAmbiguous:
		return effect.ClassAmbiguous
	case payment.ClassInFlight, payment.ClassRateLimited, payment.ClassTransient:
	}
	return effect.ClassRetry
}

// stripeFound is a Stripe lookup's answer in the protocol's terms: nothing
// found (payment.ErrNotFound) wraps effect.ErrNotFound; other errors say
// what failed.
func stripeFound[T any](found T, err error, what string) (T, error) {
	switch {
	case errors.Is(err, payment.ErrNotFound):
		return found, fmt.Errorf("%s: %w", what, effect.ErrNotFound)
	case err != nil:
		return found, fmt.Errorf("%s: %w", what, err)
	}
	return found, nil
}

// mailClass is what a failed SendGrid send means to the effect protocol.
// A transient failure may hide a send that happened: the next attempt's
// claim follows this one, so it looks for SendGrid's event first.
func mailClass(err error) effect.Class {
	switch {
	case email.IsConfiguration(err):
		return effect.ClassAlert
	case email.IsPermanent(err):
		return effect.ClassRefused
	default:
		return effect.ClassRetry
	}
}

// boundary turns what the protocol classified into the activity's errors:
// an alert is counted and logged and stays retryable, a key reused with
// another request is final, a retry is a plain error naming what failed.
// Errors of the kinds themselves (fenced, unexpected, …) pass unchanged.
func (a *Activities) boundary(ctx context.Context, kind metrics.Effect, what string, err error) error {
	var pe *effect.Error
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	switch pe.Class {
	case effect.ClassAlert:
		a.Metrics.EffectOutcome(kind, metrics.ResultProviderAuth)
		logger(ctx).Error("provider refused our configuration: fix the API key or base URL; the effect is retried",
			"effect", string(kind), "error", pe.Err)
		return temporal.NewApplicationErrorWithCause(
			fmt.Sprintf("%s: the provider refused the API key or base URL (fix the configuration)", what), ErrTypeProviderAuth, pe.Err)
	case effect.ClassMismatch:
		return temporal.NewNonRetryableApplicationError("provider refused the key: same key, different parameters", ErrTypeIdempotencyMismatch, pe.Err)
	case effect.ClassDeferred:
		if deadline.TooLate(pe.Err) {
			// Not sent this late in the attempt: the next one sends it.
			return temporal.NewApplicationErrorWithCause(fmt.Sprintf("%s: not sent, too near the attempt's deadline", what), ErrTypeTooLate, pe.Err)
		}
		// Not a failure: the request waits for its slot at the shared
		// rate limit, Temporal retrying the activity when it has one.
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%s: waiting for the provider's rate limit", what), ErrTypeRateLimited,
			temporal.ApplicationErrorOptions{Cause: pe.Err, NextRetryDelay: pe.RetryAfter})
	case effect.ClassRetry, effect.ClassRefused, effect.ClassAmbiguous:
	}
	return fmt.Errorf("%s: %w", what, pe.Err)
}

// logger is the activity's logger, or slog's default for a context that
// is no activity's (an activity method called directly, as the drain and
// conformance tests do): structured either way, never a panic.
func logger(ctx context.Context) log.Logger {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return log.NewStructuredLogger(slog.Default())
}

// attempt is the frame of one activity attempt at an effect: begin it
// under the protocol (drain-safe context, heartbeats, refused while
// draining), derive its key (name, messageID), run fn with both, then end
// it and count what fn returned. Its provider requests belong to the flow
// of consumer at the shared rate limits (ratelimit.WithFlow).
func attempt[T any](ctx context.Context, a *Activities, name identity.Effect, consumer, messageID string, count func(T, error),
	fn func(ctx context.Context, key string) (T, error)) (res T, err error) {
	ctx, end, err := a.beginEffect(ratelimit.WithFlow(ctx, consumer))
	if err != nil {
		return res, err
	}
	defer func() {
		end()
		count(res, err)
	}()
	key, err := identity.Key(name, messageID)
	if err != nil {
		return res, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}
	return fn(ctx, key)
}
