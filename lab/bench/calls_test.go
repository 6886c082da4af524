package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunPacedIsAnOpenLoop(t *testing.T) {
	// Calls of 50 ms at 100 a second: paced, they overlap (about 5 at
	// once) and the run takes the pace's 90 ms plus the last call.
	var now, most atomic.Int64
	lat, took, err := runPaced(context.Background(), 10, 100, func(context.Context, int) error {
		raise(&most, now.Add(1))
		time.Sleep(50 * time.Millisecond)
		now.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if took < 140*time.Millisecond || most.Load() < 3 {
		t.Errorf("took %s with at most %d at once; want ≥ 140 ms and calls overlapping", took, most.Load())
	}
	for i, l := range lat {
		if l < 50*time.Millisecond {
			t.Errorf("call %d: latency %s, want ≥ 50 ms", i, l)
		}
	}

	// The first error stops the run: no call starts after it.
	boom := errors.New("boom")
	var calls atomic.Int64
	if _, _, err := runPaced(context.Background(), 100, 100, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 2 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) || calls.Load() > 5 {
		t.Errorf("error %v after %d calls, want boom after about 3", err, calls.Load())
	}
}

// raise sets v to n when n is larger.
func raise(v *atomic.Int64, n int64) {
	for m := v.Load(); n > m; m = v.Load() {
		if v.CompareAndSwap(m, n) {
			return
		}
	}
}
