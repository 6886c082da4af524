// Package deadline bounds each HTTP request from when it is sent, not from
// when the caller asked: a transport wrapped around it (a rate limiter) may
// hold the request first without eating into its timeout.
package deadline

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

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
