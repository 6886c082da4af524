package listener

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveShort serves h within lim on a free loopback port until the test ends.
func serveShort(t *testing.T, h http.Handler, lim Limits) string {
	t.Helper()
	ln, err := Listen(context.Background(), "test listener", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, "test listener", ln, h, lim, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// closedWithin reports whether the server ends c (EOF or reset) within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

var short = Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
	WriteTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond, ShutdownGrace: 200 * time.Millisecond}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

// TestSlowHeadersAreCut: headers that never end lose the connection after
// ReadHeaderTimeout.
func TestSlowHeadersAreCut(t *testing.T) {
	c, err := net.Dial("tcp", serveShort(t, ok, short))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
	if !closedWithin(t, c, 2*time.Second) {
		t.Error("a client whose headers never end kept its connection past the read-header timeout")
	}
}

// TestIdleConnectionsAreClosed: a keep-alive connection with no request is
// closed after IdleTimeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	c, err := net.Dial("tcp", serveShort(t, ok, short))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if !closedWithin(t, c, 3*time.Second) {
		t.Error("an idle keep-alive connection stayed open past the idle timeout")
	}
}

// TestWriteTimeoutCutsASlowResponse: a response not written within
// WriteTimeout never reaches the client; the connection is closed.
func TestWriteTimeoutCutsASlowResponse(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Second)
		w.WriteHeader(http.StatusNoContent)
	})
	c, err := net.Dial("tcp", serveShort(t, slow, short))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		_ = resp.Body.Close()
		t.Errorf("a response written after the write timeout arrived: %s", resp.Status)
	}
}

// TestEveryListenerIsBounded: the worker's listeners all have time bounds;
// the webhook endpoint also limits connections and rate.
func TestEveryListenerIsBounded(t *testing.T) {
	for name, l := range map[string]Limits{"health": Health(), "webhook": Webhook(), "pprof": Pprof(), "codec": Codec()} {
		if l.ReadHeaderTimeout <= 0 || l.ReadTimeout <= 0 || l.WriteTimeout <= 0 || l.IdleTimeout <= 0 || l.MaxHeaderBytes <= 0 || l.ShutdownGrace <= 0 {
			t.Errorf("%s: %+v has an unbounded time or size", name, l)
		}
	}
	if w := Webhook(); w.MaxConns <= 0 || w.Rate <= 0 || w.Burst <= 0 {
		t.Errorf("webhook: %+v, want connection and rate limits", w)
	}
}
