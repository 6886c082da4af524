package retention

import (
	"strings"
	"testing"
	"time"
)

// TestWithQuarantineRefusesShorterThanTheHorizon: the worker's start check of
// QUARANTINE_RETENTION refuses a value shorter than the horizon with an error
// naming the variable and both durations, and takes one at or past it.
func TestWithQuarantineRefusesShorterThanTheHorizon(t *testing.T) {
	h, err := Compute(Inputs{
		Redelivery:      &Redelivery{AckWait: 30 * time.Second, MaxDeliver: 4},
		DuplicateWindow: 2 * time.Minute, NamespaceRetention: 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := Policy{Keep: 30 * 24 * time.Hour, Horizon: h}
	_, err = WithQuarantine(base, time.Hour)
	if err == nil || !strings.Contains(err.Error(), "QUARANTINE_RETENTION") || !strings.Contains(err.Error(), "1h0m0s") ||
		!strings.Contains(err.Error(), "25h4m0s") {
		t.Errorf("1h: err = %v, want it to name QUARANTINE_RETENTION, 1h0m0s and the horizon 25h4m0s", err)
	}
	if _, err := WithQuarantine(base, 0); err == nil || !strings.Contains(err.Error(), "QUARANTINE_RETENTION") {
		t.Errorf("0: err = %v, want a refusal naming QUARANTINE_RETENTION", err)
	}
	for _, keep := range []time.Duration{h.Total, 30 * 24 * time.Hour} {
		p, err := WithQuarantine(base, keep)
		if err != nil || p.Quarantine != keep || p.Keep != base.Keep || p.Check() != nil {
			t.Errorf("%s: policy %+v, %v; want it taken", keep, p, err)
		}
	}
}
