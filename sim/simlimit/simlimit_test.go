package simlimit_test

import (
	"testing"
	"time"

	"github.com/effectively/effectively/sim/simlimit"
)

func TestBucketsRefillAndRefuseTogether(t *testing.T) {
	now := time.Unix(1_000, 0)
	l := simlimit.New(func() time.Time { return now })
	rates := []simlimit.Rate{{PerSecond: 10, Burst: 3}, {PerSecond: 2, Burst: 2}}
	keys := []string{"global", "endpoint"}
	for i := range 2 {
		if ok, _, _ := l.Check(keys, rates); !ok {
			t.Fatalf("request %d refused inside the burst", i)
		}
	}
	ok, full, wait := l.Check(keys, rates)
	if ok || full != 1 || wait != 500*time.Millisecond {
		t.Fatalf("third request: ok=%v full=%d wait=%s, want refused by the endpoint bucket for 500ms", ok, full, wait)
	}
	// The refusal took nothing from the global bucket: one token is left.
	if ok, _, _ := l.Check([]string{"global"}, rates[:1]); !ok {
		t.Fatal("a refused request took a global token")
	}
	if ok, full, _ := l.Check([]string{"global"}, rates[:1]); ok || full != 0 {
		t.Fatal("global bucket not empty after its burst")
	}
	now = now.Add(time.Second)
	if ok, _, _ := l.Check(keys, rates); !ok {
		t.Fatal("refused after a second's refill")
	}
	if got := simlimit.RetryAfterSeconds(100 * time.Millisecond); got != 1 {
		t.Fatalf("RetryAfterSeconds(100ms) = %d, want 1", got)
	}
	if ok, _, _ := l.Check([]string{"x"}, []simlimit.Rate{{}}); !ok {
		t.Fatal("a zero rate limited")
	}
}
