package payment

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v76"
)

// Class says what a failure means for the caller: whether to give up, retry
// or reconcile.
type Class string

// The classes of failure.
const (
	// ClassDeclined: the card was declined (402 card_error). Final.
	ClassDeclined Class = "declined"
	// ClassInvalid: the request is wrong (400 parameter errors, 401, 403,
	// 404, or a request rejected before it was sent). Final.
	ClassInvalid Class = "invalid_request"
	// ClassIdempotencyMismatch: the idempotency key was already used with
	// other parameters (400 idempotency_error). A bug; final.
	ClassIdempotencyMismatch Class = "idempotency_mismatch"
	// ClassInFlight: another request with the same key is still running
	// (409). Retry later with the same key.
	ClassInFlight Class = "in_flight"
	// ClassRateLimited: Stripe is rate limiting (429). Retry later.
	ClassRateLimited Class = "rate_limited"
	// ClassTransient: a transport error, timeout, cancellation or 5xx not
	// known to be ambiguous. Retry with the same key.
	ClassTransient Class = "transient"
	// ClassAmbiguous: Stripe replayed a saved 500 for the key, so the
	// original attempt failed after Stripe started executing it and may have
	// charged. Retrying the key only replays the 500; reconcile by looking
	// the charge up (FindByMessageID) first.
	ClassAmbiguous Class = "ambiguous"
)

// Retryable reports whether retrying the same request with the same key can
// help: true for ClassInFlight, ClassRateLimited and ClassTransient.
func (c Class) Retryable() bool {
	switch c {
	case ClassInFlight, ClassRateLimited, ClassTransient:
		return true
	default:
		return false
	}
}

// Error is a classified failure of a Stripe call. Charge, Get and
// FindByMessageID wrap one in every error they return (other than
// ErrNotFound from FindByMessageID); get it with errors.As.
type Error struct {
	// Class is what the failure means for the caller.
	Class Class
	// HTTPStatus is the HTTP status Stripe answered with; 0 if there was no
	// answer.
	HTTPStatus int
	// Type is Stripe's error type, e.g. card_error.
	Type string
	// Code is Stripe's error code, e.g. card_declined.
	Code string
	// DeclineCode is the issuer's reason for a decline, e.g.
	// insufficient_funds.
	DeclineCode string
	// Message is Stripe's message, or the transport error's; it never
	// contains the API key.
	Message string
	// RequestID is Stripe's Request-Id, req_..., for support.
	RequestID string
	// Err is the underlying error: a *stripe.Error for answers from Stripe,
	// otherwise the transport or context error.
	Err error
}

// Error describes the failure, e.g.
// "declined: 402 card_error card_declined (generic_decline): Your card was declined. [req_123]".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Class))
	b.WriteString(":")
	if e.HTTPStatus != 0 {
		b.WriteString(" ")
		b.WriteString(strconv.Itoa(e.HTTPStatus))
	}
	for _, s := range []string{e.Type, e.Code} {
		if s != "" {
			b.WriteString(" ")
			b.WriteString(s)
		}
	}
	if e.DeclineCode != "" {
		b.WriteString(" (" + e.DeclineCode + ")")
	}
	if e.Message != "" {
		if e.HTTPStatus != 0 || e.Type != "" || e.Code != "" {
			b.WriteString(":")
		}
		b.WriteString(" ")
		b.WriteString(e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" [" + e.RequestID + "]")
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e is a 404 when target is ErrNotFound.
func (e *Error) Is(target error) bool {
	return target == ErrNotFound && e.HTTPStatus == http.StatusNotFound
}

// localError is a request rejected before it was sent.
func localError(msg string) *Error {
	return &Error{Class: ClassInvalid, Message: msg}
}

// newError classifies an error returned by stripe-go, scrubbing the API key
// from everything it keeps.
func (c *Client) newError(err error) *Error {
	var se *stripe.Error
	if errors.As(err, &se) {
		if c.apiKey != "" && strings.Contains(se.Msg, c.apiKey) {
			scrubbed := *se
			scrubbed.Msg = strings.ReplaceAll(se.Msg, c.apiKey, "[REDACTED]")
			se = &scrubbed
		}
		return &Error{
			Class:       classifyStripe(se),
			HTTPStatus:  se.HTTPStatusCode,
			Type:        string(se.Type),
			Code:        string(se.Code),
			DeclineCode: string(se.DeclineCode),
			Message:     se.Msg,
			RequestID:   se.RequestID,
			Err:         se,
		}
	}
	msg := err.Error()
	if c.apiKey != "" && strings.Contains(msg, c.apiKey) {
		// Never seen in practice, but the key must not escape: keep the
		// classification and drop the original error.
		msg = strings.ReplaceAll(msg, c.apiKey, "[REDACTED]")
		return &Error{Class: Classify(err), Message: msg, Err: errors.New(msg)}
	}
	return &Error{Class: Classify(err), Message: msg, Err: err}
}

// Classify tells what err means for the caller. It understands *Error (its
// Class), *stripe.Error (by HTTP status, type, code and the
// Idempotent-Replayed header), ErrNotFound (ClassInvalid), and context,
// net and url errors (ClassTransient). Any other error is ClassTransient,
// since retrying a Stripe call with the same idempotency key is always safe.
// Classify(nil) is "".
func Classify(err error) Class {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Class
	}
	if se, ok := errors.AsType[*stripe.Error](err); ok {
		return classifyStripe(se)
	}
	if errors.Is(err, ErrNotFound) {
		return ClassInvalid
	}
	// Context, net and url errors, and anything unknown: stripe-go never
	// sent the request or never got an answer.
	return ClassTransient
}

// classifyStripe classifies an answer from Stripe.
func classifyStripe(se *stripe.Error) Class {
	status := se.HTTPStatusCode
	switch {
	case se.Type == stripe.ErrorTypeCard || status == http.StatusPaymentRequired:
		return ClassDeclined
	case se.Type == stripe.ErrorTypeIdempotency &&
		(status == http.StatusConflict || se.Code == stripe.ErrorCodeIdempotencyKeyInUse):
		return ClassInFlight
	case se.Type == stripe.ErrorTypeIdempotency:
		return ClassIdempotencyMismatch
	case status == http.StatusTooManyRequests:
		return ClassRateLimited
	case status >= http.StatusInternalServerError:
		// Only POSTs are replayed, and Stripe replays a 500 only if it had
		// started executing the request.
		if se.LastResponse != nil && se.LastResponse.Header.Get("Idempotent-Replayed") == "true" {
			return ClassAmbiguous
		}
		return ClassTransient
	case status == http.StatusConflict:
		return ClassTransient // a lock conflict on the object; retry
	case status >= http.StatusBadRequest:
		return ClassInvalid
	}
	return ClassTransient
}
