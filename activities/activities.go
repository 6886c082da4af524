package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// Activities holds the dependencies of every activity. It is built once per
// worker process and registered with Register(w, &Activities{...}), each
// activity under its constant name (names.go).
type Activities struct {
	// Store is the Postgres record.
	Store *store.Store
	// Payments is the Stripe client.
	Payments *payment.Client
	// Mailer is the SendGrid client.
	Mailer *email.Client
	// EmailPolicy chooses the duplicate-vs-loss trade-off of receipts.
	// Default store.AtLeastOnce.
	EmailPolicy store.EmailPolicy
	// AmbiguousAttempts is how many lists of Stripe that find nothing after
	// an ambiguous create (over the local and the regular attempts) its
	// absence takes to be proof that nothing was created. Default 5.
	AmbiguousAttempts int32
	// Retention is how long Prune keeps processed, inbox, outbox and
	// quarantine rows (internal/intake/retention checks it at start). Zero:
	// Prune refuses to run.
	Retention PrunePolicy
	// KeyTrust is the effect protocol's key window: how long after the claim
	// Stripe's keys are trusted to replay; past it a retry looks up before
	// it calls (internal/effect). Default 23h.
	KeyTrust time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Drain lets a worker shutdown wait for the effects in flight instead
	// of cancelling them between the provider call and the record (see
	// Drainer). Nil: effects run on the activity's own context.
	Drain *Drainer
	// Metrics counts effect outcomes (and business duplicates). Nil counts
	// nothing.
	Metrics *metrics.Metrics
	// ResendGrace is how long a receipt retry after a possible send waits
	// for SendGrid's event (/webhooks/sendgrid) before resending, under
	// at-least-once. Zero: no wait. Shorter than the start-to-close.
	ResendGrace time.Duration
	// EventPoll is how often that wait reads the event table. Default 250ms.
	EventPoll time.Duration
	// Auditor runs AuditLedger. Nil: AuditLedger refuses.
	Auditor *audit.Auditor
}

func (a *Activities) keyTrust() time.Duration {
	if a.KeyTrust <= 0 {
		return 23 * time.Hour
	}
	return a.KeyTrust
}

func (a *Activities) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

func (a *Activities) emailPolicy() store.EmailPolicy {
	if a.EmailPolicy == "" {
		return store.AtLeastOnce
	}
	return a.EmailPolicy
}

func (a *Activities) ambiguousAttempts() int32 {
	if a.AmbiguousAttempts <= 0 {
		return 5
	}
	return a.AmbiguousAttempts
}

// requestHash is the SHA-256 of v's JSON: the fingerprint of the request an
// idempotency key stands for.
func requestHash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are hashed
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fenced converts store.ErrFenced into a retryable error of type
// ErrTypeFenced, and store.ErrMismatch and store.ErrRefundNotSucceeded into
// non-retryable ones.
func fenced(err error) error {
	if errors.Is(err, store.ErrFenced) {
		return temporal.NewApplicationErrorWithCause("a later claim owns this effect", ErrTypeFenced, err)
	}
	if errors.Is(err, store.ErrMismatch) {
		return temporal.NewNonRetryableApplicationError("idempotency key reused with a different request", ErrTypeIdempotencyMismatch, err)
	}
	if errors.Is(err, store.ErrRefundNotSucceeded) {
		// The refund failed or went pending since the receipt checked it.
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRefundNotSucceeded, err)
	}
	return err
}

// AttemptError is the error of a local attempt, returned as data.
type AttemptError struct {
	Message      string `json:"message"`
	Type         string `json:"type,omitempty"`
	NonRetryable bool   `json:"non_retryable,omitempty"`
}

// Err rebuilds the error for the workflow: an application error of the
// same type and retryability.
func (e *AttemptError) Err() error {
	if e.NonRetryable {
		return temporal.NewNonRetryableApplicationError(e.Message, e.Type, nil)
	}
	return temporal.NewApplicationError(e.Message, e.Type)
}

// attemptError turns err into data. A cancelled or timed-out context is
// not an outcome of the effect: it stays an error for the SDK to handle.
func attemptError(ctx context.Context, err error) (*AttemptError, error) {
	if err == nil || ctx.Err() != nil {
		return nil, err
	}
	return ErrorAsData(err), nil
}

// ErrorAsData is err as an AttemptError, keeping the type and
// retryability of an application error; nil for nil.
func ErrorAsData(err error) *AttemptError {
	if err == nil {
		return nil
	}
	e := &AttemptError{Message: err.Error()}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		e.Type, e.NonRetryable = appErr.Type(), appErr.NonRetryable()
	}
	return e
}
