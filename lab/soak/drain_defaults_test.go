package soak

import (
	"testing"
	"time"
)

// TestDrainProbeSpacing: the probes fit within 90% of the burst's drain
// when 250 ms apart would not, never faster than a fifth of the limit, and
// a spacing given is kept.
func TestDrainProbeSpacing(t *testing.T) {
	for _, tt := range []struct {
		cfg  DrainConfig
		want time.Duration
	}{
		{DrainConfig{Limit: 60}, 150 * time.Millisecond},                                     // 1,000 drain in 16.7 s
		{DrainConfig{Limit: 20}, 250 * time.Millisecond},                                     // 1,000 drain in 50 s
		{DrainConfig{Limit: 20, Burst: 200}, 250 * time.Millisecond},                         // a fifth of 20/s
		{DrainConfig{Limit: 10}, 500 * time.Millisecond},                                     // a fifth of 10/s
		{DrainConfig{Limit: 60, Burst: -1}, 250 * time.Millisecond},                          // no burst
		{DrainConfig{Limit: 60, ProbeEvery: 400 * time.Millisecond}, 400 * time.Millisecond}, // given
	} {
		c := tt.cfg
		c.setDefaults()
		if c.ProbeEvery != tt.want {
			t.Errorf("%+v: probes every %s, want %s", tt.cfg, c.ProbeEvery, tt.want)
		}
	}
}

// TestFiveSlowest: the report's five slowest probes, slowest first, each
// with when it was sent; fewer when fewer ran.
func TestFiveSlowest(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	l := latencies{total: ms(10, 90, 20, 70, 30, 80, 5), sentAt: ms(0, 250, 500, 750, 1000, 1250, 1500)}
	if got, want := l.five(), "90ms at 250ms, 80ms at 1.25s, 70ms at 750ms, 30ms at 1s, 20ms at 500ms"; got != want {
		t.Errorf("five() = %q, want %q", got, want)
	}
	if got, want := (latencies{total: ms(12), sentAt: ms(0)}).five(), "12ms at 0s"; got != want {
		t.Errorf("five() of one = %q, want %q", got, want)
	}
}
