package email_test

import "testing"

// Warm encodes a mail and sends nothing.
func TestWarmSendsNothing(t *testing.T) {
	sim, srv := newSim(t)
	if err := newClient(t, srv.URL).Warm(); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Fatalf("Warm sent %d requests, want none", n)
	}
}
