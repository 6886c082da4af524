package simfault

import (
	"context"
	"net/http"
	"time"
)

// Sleep waits d, or until ctx is done, and reports whether it waited the
// whole time. A d of 0 or less does not wait and reports whether ctx is
// still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// DropConnection closes the client's connection without answering, as when
// an answer is lost on the way back. It must be the last thing a handler
// does with w. When w cannot be hijacked (HTTP/2, a recorder) it panics
// with http.ErrAbortHandler, which makes net/http abort the response: it
// resets the stream or closes the connection.
func DropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
