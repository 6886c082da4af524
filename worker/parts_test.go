package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/health"
)

// TestReadyzFailsWhenAPartFails: when one part of the intake fails (a
// listener that cannot serve, a source that gives up), /readyz answers 503
// naming "shutdown" at once, while the other parts are still stopping, and
// the drain deadline runs from that moment, not from the last part's end.
func TestReadyzFailsWhenAPartFails(t *testing.T) {
	var draining atomic.Bool
	var stopping atomic.Int64
	mux := http.NewServeMux()
	health.New(0, shutdownCheck(&draining)).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	readyz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	failure := errors.New("webhook endpoint: listen tcp 127.0.0.1:8082: bind: address already in use")
	fail := make(chan struct{})
	stopped := make(chan struct{}) // the other part saw its context end
	release := make(chan struct{}) // lets the other part finish stopping
	done := make(chan error, 1)
	go func() {
		done <- runParts(t.Context(), &draining, &stopping,
			func(ctx context.Context) error {
				<-ctx.Done()
				close(stopped)
				<-release
				return nil
			},
			func(context.Context) error {
				<-fail
				return failure
			})
	}()

	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("before the failure /readyz = %d %s, want 200", code, body)
	}
	failedAt := time.Now()
	close(fail)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the other part's context did not end when a part failed")
	}
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"shutdown"`) {
		t.Errorf("while the parts stop /readyz = %d %s, want 503 naming shutdown", code, body)
	}
	if at := time.Unix(0, stopping.Load()); stopping.Load() == 0 || at.Before(failedAt) {
		t.Errorf("the drain deadline runs from %v, want the failure's moment (%v)", at, failedAt)
	}
	close(release)
	if err := <-done; !errors.Is(err, failure) {
		t.Errorf("runParts = %v, want the part's failure", err)
	}
}

// TestRunPartsMarksDrainingWhenCanceled: SIGTERM (ctx's end) marks the
// drain too, and a clean stop returns nil.
func TestRunPartsMarksDrainingWhenCanceled(t *testing.T) {
	var draining atomic.Bool
	var stopping atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runParts(ctx, &draining, &stopping, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	time.Sleep(20 * time.Millisecond)
	if draining.Load() {
		t.Fatal("draining before anything stopped")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runParts = %v, want nil", err)
	}
	if !draining.Load() || stopping.Load() == 0 {
		t.Errorf("draining %v, stopping %d after SIGTERM: want both set", draining.Load(), stopping.Load())
	}
}
