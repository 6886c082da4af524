package periodic_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/leaf/periodic"
)

// TestRunCallsUntilStopped: fn runs on the ticker, and not once stop has
// returned.
func TestRunCallsUntilStopped(t *testing.T) {
	var n atomic.Int64
	stop := periodic.Run(5*time.Millisecond, func() { n.Add(1) })
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("fn ran %d times in 5 s, want 3", n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	at := n.Load()
	time.Sleep(30 * time.Millisecond)
	if got := n.Load(); got != at {
		t.Fatalf("fn ran %d more times after stop", got-at)
	}
}
