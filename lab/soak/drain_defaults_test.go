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
