package effect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// Names are the effect names of the four effect kinds, one per kind (the
// payment's PaymentIntent create has a key of its own too,
// identity.EffectPaymentIntent).
var Names = []identity.Effect{identity.EffectPayment, identity.EffectRefund, identity.EffectEmail, identity.EffectRefundEmail}

// Step is what an attempt does first.
type Step string

// Steps.
const (
	// StepCall: call the provider under the key. No earlier claim may have
	// reached it, or its key replays what it did.
	StepCall Step = "call"
	// StepLookup: an earlier claim may have reached the provider and the
	// key no longer replays (or never existed): look the effect up first.
	StepLookup Step = "lookup"
)

// Attempt is one claim of an effect's ledger row.
type Attempt struct {
	// Claim is the fencing token the claim returned: 1 for the first claim.
	Claim int32
	// ClaimedAt is when the effect was first claimed.
	ClaimedAt time.Time
	// KeyWindow is how long the provider is trusted to replay the key
	// (Stripe keeps keys 24 h). Zero: the provider keeps no key (SendGrid).
	KeyWindow time.Duration
	// Unsent: every claim before this one gave its request back unsent
	// (Releaser), so this one is as good as the first.
	Unsent bool
}

// First is the attempt's first step at now (see Step).
func (a Attempt) First(now time.Time) Step {
	if a.Claim <= 1 || a.Unsent {
		return StepCall
	}
	if a.KeyWindow > 0 && now.Sub(a.ClaimedAt) <= a.KeyWindow {
		return StepCall
	}
	return StepLookup
}

// PastWindow reports whether the provider may have forgotten the key at
// now: always true for a provider that keeps none.
func (a Attempt) PastWindow(now time.Time) bool {
	return a.KeyWindow <= 0 || now.Sub(a.ClaimedAt) > a.KeyWindow
}

// Class says what a failed provider call means.
type Class string

// Classes of failure.
const (
	// ClassRetry: transient (transport, timeout, 409, 429, 5xx). Retry the
	// same request under the same key.
	ClassRetry Class = "retry"
	// ClassAlert: our authentication or configuration (401, 403, a wrong
	// base URL). Retried like ClassRetry, never recorded as the effect's
	// outcome, and counted for an operator's alert.
	ClassAlert Class = "alert"
	// ClassRefused: the provider refused the request for good (a decline,
	// an invalid address). Recorded.
	ClassRefused Class = "refused"
	// ClassAmbiguous: the provider may have acted (a replayed 500). Look it
	// up before anything else.
	ClassAmbiguous Class = "ambiguous"
	// ClassMismatch: the key was used with another request. A bug; final.
	ClassMismatch Class = "mismatch"
	// ClassDeferred: the request was never sent (NotSent): the shared rate
	// limit had no slot for it in time, or the attempt's deadline was too
	// near. Retry after Error.RetryAfter; it is not a failure of the effect.
	ClassDeferred Class = "deferred"
)

// Via says how an outcome was established.
type Via string

// Ways an outcome is established.
const (
	// ViaCall: the provider's answer to this attempt's call (or its replay).
	ViaCall Via = "call"
	// ViaLookup: found by a lookup and adopted after the check.
	ViaLookup Via = "lookup"
)

// NotSent reports whether err is a request that was never sent, and when
// to try again: the shared rate limit had no slot for it in time
// (ratelimit.DeferredError), or its attempt's deadline was too near
// (deadline.TooLateError; again at once, under a new deadline). A resend
// refused after an earlier send of the same request went out (an HTTP
// client's retry) is not one of them (deadline.Refusal).
func NotSent(err error) (retryAfter time.Duration, ok bool) {
	if d, ok := ratelimit.Deferred(err); ok {
		return d, true
	}
	return 0, deadline.TooLate(err)
}

// ErrNotFound is wrapped by a Lookup that found nothing.
var ErrNotFound = errors.New("effect: not found at the provider")

// Error is a failure the protocol classified. Activities turn it into
// their error types at their boundary.
type Error struct {
	Class Class
	Err   error
	// RetryAfter is when a ClassDeferred request may have its slot.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return string(e.Class) + ": " + e.Err.Error() }

// Unwrap returns the provider's error.
func (e *Error) Unwrap() error { return e.Err }

// ClassOf is the Class of an *Error in err's chain, "" for none.
func ClassOf(err error) Class {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Class
	}
	return ""
}

// Kind is what one effect kind supplies: P is the provider's answer, Out
// the activity's result.
type Kind[P, Out any] interface {
	// Call asks the provider for the effect under its key. The same
	// request every time: built from the message alone.
	Call(ctx context.Context) (P, error)
	// Lookup reads what the provider holds for the effect, strongly
	// consistently. Nothing there: an error wrapping ErrNotFound.
	Lookup(ctx context.Context) (P, error)
	// Differs says how an answer found by Lookup differs from the request:
	// "" when it is the request's.
	Differs(found P) string
	// Classify says what a failed Call means.
	Classify(err error) Class
	// Record records the provider's answer under the attempt's token.
	Record(ctx context.Context, p P, via Via) (Out, error)
	// Refused records a refusal for good (ClassRefused).
	Refused(ctx context.Context, cause error) (Out, error)
	// Foreign handles an answer found by Lookup that is not the request's:
	// never adopted, never recorded as the effect's outcome.
	Foreign(ctx context.Context, found P, reason string) (Out, error)
	// Unfound handles an ambiguous call whose Lookup found nothing.
	Unfound(ctx context.Context, cause error) (Out, error)
}

// Releaser is a Kind whose Call is one request. When that request is not
// sent (NotSent), Run gives its claim back (store.ReleaseEffect), so that
// the next claim calls at once (Attempt.Unsent) instead of looking for a
// send that never happened, and at-most-once does not settle it unknown. A
// kind of two requests is no Releaser: its first (the charge's create) may
// have acted when its second was not sent.
type Releaser interface {
	Release(ctx context.Context) error
}

// Run runs one claimed attempt at an effect: the lookup its Attempt calls
// for, the call, and the record, in the order of the protocol (see the
// package documentation). It makes no Postgres transaction of its own:
// only k's Record, Refused, Foreign and Unfound do.
func Run[P, Out any](ctx context.Context, at Attempt, now time.Time, k Kind[P, Out]) (Out, error) {
	if at.First(now) == StepLookup {
		out, found, err := adopt(ctx, k)
		if found || err != nil {
			return out, err
		}
	}
	p, err := k.Call(ctx)
	if err == nil {
		return k.Record(ctx, p, ViaCall)
	}
	var zero Out
	// Never sent: nothing to look up, nothing the provider may have done.
	if d, ok := NotSent(err); ok {
		if r, ok := any(k).(Releaser); ok {
			if rerr := r.Release(ctx); rerr != nil {
				// Kept: the next claim looks for an earlier send first.
				err = fmt.Errorf("%w (claim kept: %w)", err, rerr)
			}
		}
		return zero, &Error{Class: ClassDeferred, Err: err, RetryAfter: d}
	}
	switch class := k.Classify(err); class {
	case ClassRefused:
		return k.Refused(ctx, err)
	case ClassAmbiguous:
		out, found, lerr := adopt(ctx, k)
		if found || lerr != nil {
			return out, lerr
		}
		return k.Unfound(ctx, err)
	case ClassAlert, ClassMismatch, ClassRetry, ClassDeferred:
		return zero, &Error{Class: class, Err: err}
	default:
		return zero, &Error{Class: ClassRetry, Err: err}
	}
}

// adopt looks the effect up and, when found, records it if it is the
// request's (else Foreign). found is false when nothing exists.
func adopt[P, Out any](ctx context.Context, k Kind[P, Out]) (out Out, found bool, err error) {
	p, err := k.Lookup(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		return out, false, nil
	case err != nil:
		if d, ok := NotSent(err); ok {
			return out, false, &Error{Class: ClassDeferred, Err: fmt.Errorf("look up: %w", err), RetryAfter: d}
		}
		return out, false, &Error{Class: ClassRetry, Err: fmt.Errorf("look up: %w", err)}
	}
	if d := k.Differs(p); d != "" {
		out, err = k.Foreign(ctx, p, d)
		return out, true, err
	}
	out, err = k.Record(ctx, p, ViaLookup)
	return out, true, err
}
