// Package deadline bounds each HTTP request from when it is sent, not from
// when the caller asked: a transport wrapped around it (a rate limiter) may
// hold the request first without eating into its timeout. Check keeps a
// request that acts from being sent too close to its caller's deadline.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultMargin is the time a request that acts keeps free before its
// context's deadline by default (Check): its round trip and the record
// after it.
const DefaultMargin = 2 * time.Second

// TooLateError is a request that was not sent: its context's deadline was
// Left away, less than Margin. Nothing reached the provider.
type TooLateError struct {
	What         string
	Left, Margin time.Duration
}

func (e *TooLateError) Error() string {
	return fmt.Sprintf("%s: not sent: %s left before the attempt's deadline, less than the %s a call and its record need",
		e.What, e.Left.Round(time.Millisecond), e.Margin)
}

// Check returns a *TooLateError naming what when ctx's deadline is less
// than margin away (margin 0: DefaultMargin; negative: never), else nil.
//
// Why: a request that acts (a create, a confirm, a refund, a mail) sent with
// less time than that may be cut by the deadline after the provider acted.
// Its answer is then lost, and the next attempt replays it under its key
// (Stripe) or cannot tell whether it arrived (SendGrid). Not sent, it is
// sent whole by the next attempt, under a deadline of its own.
func Check(ctx context.Context, what string, margin time.Duration) error {
	if margin == 0 {
		margin = DefaultMargin
	}
	dl, ok := ctx.Deadline()
	if !ok || margin < 0 {
		return nil
	}
	if left := time.Until(dl); left < margin {
		return &TooLateError{What: what, Left: max(left, 0), Margin: margin}
	}
	return nil
}

// TooLate reports whether err is (or wraps) a *TooLateError.
func TooLate(err error) bool {
	_, ok := errors.AsType[*TooLateError](err)
	return ok
}

// Transport returns base with every request bounded by d, from connecting
// to reading the answer's body; cause is the context's cause when d
// expires (nil: context.DeadlineExceeded). d ≤ 0 returns base.
func Transport(base http.RoundTripper, d time.Duration, cause error) http.RoundTripper {
	if d <= 0 {
		return base
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, d: d, cause: cause}
}

type transport struct {
	base  http.RoundTripper
	d     time.Duration
	cause error
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), t.d, t.cause)
	resp, err := t.base.RoundTrip(r.WithContext(ctx))
	if err != nil || resp.Body == nil {
		cancel()
		return resp, err
	}
	resp.Body = &body{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// body ends the request's context when the caller closes it.
type body struct {
	io.ReadCloser
	once   sync.Once
	cancel context.CancelFunc
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.cancel)
	return err
}
