package deadline_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/leaf/deadline"
)

var errSlow = errors.New("slow")

// TestTimeoutStartsWhenSent: time spent before the request reaches the
// transport does not count; a slow answer hits the deadline with its cause;
// a quick one's body stays readable.
func TestTimeoutStartsWhenSent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: deadline.Transport(http.DefaultTransport, 200*time.Millisecond, errSlow)}

	time.Sleep(300 * time.Millisecond) // longer than the deadline, before sending
	resp, err := c.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(b) != "ok" {
		t.Fatalf("body %q, %v", b, err)
	}
	start := time.Now()
	resp, err = c.Get(srv.URL + "/slow")
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, errSlow) || time.Since(start) > time.Second {
		t.Fatalf("slow request: %v after %s, want errSlow after 200ms", err, time.Since(start))
	}
	if deadline.Transport(http.DefaultTransport, 0, nil) != http.DefaultTransport {
		t.Error("a zero deadline wraps")
	}
}
