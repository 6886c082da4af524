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
		"payment": c.paymentOptions("", "").HeartbeatTimeout,
		"receipt": c.emailOptions("", "").HeartbeatTimeout,
	} {
		if got != 10*time.Second {
			t.Errorf("%s: HeartbeatTimeout = %s, want 10s", name, got)
		}
	}
	c = Config{HeartbeatTimeout: 3 * time.Second}.withDefaults()
	if got := c.paymentOptions("", "").HeartbeatTimeout; got != 3*time.Second {
		t.Errorf("configured HeartbeatTimeout = %s, want 3s", got)
	}
}

// TestEffectsRunOnTheirRoutesQueue: with RouteQueues set, every effect
// activity of a route (charge, refund, receipt, settle) is scheduled on the
// route's own queue; without it, on the workflow's.
func TestEffectsRunOnTheirRoutesQueue(t *testing.T) {
	for _, tc := range []struct{ base, want string }{{"", ""}, {"effectively", "effectively-effects-order-refund"}} {
		c := Config{RouteQueues: tc.base}.withDefaults()
		for name, got := range map[string]string{
			"payment": c.paymentOptions("order-refund", "").TaskQueue,
			"refund":  c.refundOptions("order-refund", "").TaskQueue,
			"receipt": c.emailOptions("order-refund", "").TaskQueue,
			"settle":  c.settleOptions("order-refund", "").TaskQueue,
		} {
			if got != tc.want {
				t.Errorf("RouteQueues %q: %s runs on %q, want %q", tc.base, name, got, tc.want)
			}
		}
	}
}
