package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestCheck: a request is refused only when its deadline is nearer than the
// margin (zero: DefaultMargin; negative: never), and the error says so.
func TestCheck(t *testing.T) {
	soon, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	later, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	for name, tc := range map[string]struct {
		ctx    context.Context
		margin time.Duration
		late   bool
	}{
		"no deadline":            {context.Background(), time.Hour, false},
		"time enough":            {later, 0, false},
		"default margin":         {soon, 0, true},
		"within a margin":        {soon, 500 * time.Millisecond, false},
		"beyond a margin":        {later, 2 * time.Minute, true},
		"negative margin: never": {soon, -1, false},
	} {
		err := deadline.Check(tc.ctx, "stripe confirm pi_1", tc.margin)
		if late := deadline.TooLate(fmt.Errorf("wrapped: %w", err)); late != tc.late || (err != nil) != tc.late {
			t.Errorf("%s: err = %v, want too late %v", name, err, tc.late)
			continue
		}
		if tc.late && !strings.Contains(err.Error(), "stripe confirm pi_1: not sent") {
			t.Errorf("%s: %q does not name the request", name, err)
		}
	}
	if deadline.TooLate(errors.New("other")) || deadline.TooLate(nil) {
		t.Error("TooLate of another error")
	}
}
