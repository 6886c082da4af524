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

// sends is what TrackSends carries: the requests of one call that went out.
type sends struct {
	mu  sync.Mutex
	out map[string]bool
}

type sendsKey struct{}

// TrackSends returns ctx carrying a record of which of its requests went
// out (MarkSent). An HTTP client that retries (stripe-go after a lost
// answer, a 409 or a 5xx) sends the same request again under the same
// context; a refusal of that resend (Refusal) must not say "not sent",
// since the earlier send may have acted.
func TrackSends(ctx context.Context) context.Context {
	if _, ok := ctx.Value(sendsKey{}).(*sends); ok {
		return ctx
	}
	return context.WithValue(ctx, sendsKey{}, &sends{out: map[string]bool{}})
}

// sendKey names a request: its method, path and idempotency key.
func sendKey(r *http.Request) string {
	return r.Method + " " + r.URL.Path + " " + r.Header.Get("Idempotency-Key")
}

// MarkSent records that r went out and may have been acted on, when its
// context tracks sends.
func MarkSent(r *http.Request) {
	if s, ok := r.Context().Value(sendsKey{}).(*sends); ok {
		s.mu.Lock()
		s.out[sendKey(r)] = true
		s.mu.Unlock()
	}
}

// Refusal is err, a refusal to send r (a rate limit's, a deadline's),
// unchanged when no earlier send of r went out; else an error that is not
// "not sent" (neither a *TooLateError nor wrapping one): the provider may
// have acted on the earlier send, so the request is retried under its key,
// never taken as unsent.
func Refusal(r *http.Request, err error) error {
	s, ok := r.Context().Value(sendsKey{}).(*sends)
	if !ok {
		return err
	}
	s.mu.Lock()
	sent := s.out[sendKey(r)]
	s.mu.Unlock()
	if !sent {
		return err
	}
	// Not wrapped on purpose: this error must not say "not sent".
	return fmt.Errorf("%s %s: a resend was not sent (%s), but an earlier send went out and may have been acted on", r.Method, r.URL.Path, err.Error())
}
