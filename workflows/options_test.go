package workflows

import (
	"testing"
	"time"
)

// TestRegularEffectsHaveAHeartbeatTimeout: without one, a worker killed in
// the middle of a regular attempt is noticed only when the attempt's
// start-to-close (minutes) runs out.
func TestRegularEffectsHaveAHeartbeatTimeout(t *testing.T) {
	c := Config{}.withDefaults()
	for name, got := range map[string]time.Duration{
		"payment": c.paymentOptions("").HeartbeatTimeout,
		"receipt": c.emailOptions("").HeartbeatTimeout,
	} {
		if got != 10*time.Second {
			t.Errorf("%s: HeartbeatTimeout = %s, want 10s", name, got)
		}
	}
	c = Config{HeartbeatTimeout: 3 * time.Second}.withDefaults()
	if got := c.paymentOptions("").HeartbeatTimeout; got != 3*time.Second {
		t.Errorf("configured HeartbeatTimeout = %s, want 3s", got)
	}
}
