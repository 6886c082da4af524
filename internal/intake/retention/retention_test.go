package retention

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestRedeliveryWindow(t *testing.T) {
	tests := []struct {
		name string
		r    Redelivery
		want time.Duration
		err  bool
	}{
		{"ack wait per delivery", Redelivery{AckWait: 30 * time.Second, MaxDeliver: 5}, 150 * time.Second, false},
		{"single delivery", Redelivery{AckWait: time.Minute, MaxDeliver: 1}, time.Minute, false},
		{"backoff replaces ack wait", Redelivery{AckWait: time.Hour, MaxDeliver: 3, BackOff: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}}, 7 * time.Second, false},
		{"last backoff repeats", Redelivery{MaxDeliver: 5, BackOff: []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute}}, 36*time.Minute + 30*time.Second, false},
		{"backoff longer than max deliver", Redelivery{MaxDeliver: 2, BackOff: []time.Duration{time.Second, time.Minute, time.Hour}}, time.Minute + time.Second, false},
		{"unlimited", Redelivery{AckWait: time.Second, MaxDeliver: -1}, 0, true},
		{"zero max deliver", Redelivery{AckWait: time.Second}, 0, true},
		{"zero ack wait", Redelivery{MaxDeliver: 2}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.r.Window()
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("window = %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := (Redelivery{MaxDeliver: 0, AckWait: time.Second}).Window(); !errors.Is(err, ErrUnbounded) {
		t.Errorf("unlimited: err = %v, want ErrUnbounded", err)
	}
}

func TestCompute(t *testing.T) {
	r := &Redelivery{AckWait: 30 * time.Second, MaxDeliver: 4}
	tests := []struct {
		name string
		in   Inputs
		want time.Duration
		err  bool
	}{
		{"all terms", Inputs{Redelivery: r, DuplicateWindow: 2 * time.Minute, NamespaceRetention: 24 * time.Hour, Margin: 10 * time.Minute}, 2*time.Minute + 2*time.Minute + 24*time.Hour + 10*time.Minute, false},
		{"default margin", Inputs{Redelivery: r, NamespaceRetention: 24 * time.Hour}, 2*time.Minute + 24*time.Hour + DefaultMargin, false},
		{"no margin", Inputs{Redelivery: r, Margin: -1}, 2 * time.Minute, false},
		{"no broker", Inputs{NamespaceRetention: 72 * time.Hour, Margin: -1}, 72 * time.Hour, false},
		{"unbounded broker", Inputs{Redelivery: &Redelivery{AckWait: time.Second}}, 0, true},
		{"negative retention", Inputs{NamespaceRetention: -time.Hour}, 0, true},
		{"longest source counts", Inputs{Margin: -1, Sources: []SourceHorizon{
			{Source: "jetstream", Redelivery: 36 * time.Minute, DuplicateWindow: 2 * time.Minute},
			{Source: "kafka", Redelivery: 14 * 24 * time.Hour},
			{Source: "rabbitmq", Redelivery: 24 * time.Hour},
		}}, 14 * 24 * time.Hour, false},
		{"negative source term", Inputs{Sources: []SourceHorizon{{Source: "x", Redelivery: -time.Second}}}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Compute(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if h.Total != tt.want {
				t.Fatalf("total = %s, want %s (%s)", h.Total, tt.want, h)
			}
			if !tt.err && h.Total != h.Redelivery+h.DuplicateWindow+h.NamespaceRetention+h.Margin {
				t.Fatalf("total is not the sum of its terms: %s", h)
			}
		})
	}
}

func TestPolicyCheck(t *testing.T) {
	h, err := Compute(Inputs{Redelivery: &Redelivery{AckWait: 30 * time.Second, MaxDeliver: 5}, DuplicateWindow: 2 * time.Minute, NamespaceRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		keep time.Duration
		ok   bool
	}{
		{30 * 24 * time.Hour, true},
		{h.Total, true},
		{h.Total - time.Second, false},
		{time.Hour, false},
		{0, false},
	}
	for _, tt := range tests {
		err := Policy{Keep: tt.keep, Horizon: h}.Check()
		if (err == nil) != tt.ok {
			t.Errorf("keep %s: err = %v, want ok %v", tt.keep, err, tt.ok)
		}
		if err != nil && tt.keep > 0 {
			// The error names both numbers.
			if !strings.Contains(err.Error(), tt.keep.String()) || !strings.Contains(err.Error(), h.Total.String()) {
				t.Errorf("keep %s: error %q does not name both %s and %s", tt.keep, err, tt.keep, h.Total)
			}
		}
	}
}

func TestPolicyCheckQuarantine(t *testing.T) {
	h, err := Compute(Inputs{Redelivery: &Redelivery{AckWait: time.Minute, MaxDeliver: 5}, DuplicateWindow: 2 * time.Minute, NamespaceRetention: 72 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		quarantine time.Duration
		ok         bool
	}{
		{30 * 24 * time.Hour, true},
		{h.Total, true},
		{0, true}, // never pruned
		{h.Total - time.Second, false},
		{time.Hour, false},
		{-time.Hour, false},
	}
	for _, tt := range tests {
		p := Policy{Keep: 30 * 24 * time.Hour, Quarantine: tt.quarantine, Horizon: h}
		err := p.CheckQuarantine()
		if (err == nil) != tt.ok {
			t.Errorf("quarantine %s: err = %v, want ok %v", tt.quarantine, err, tt.ok)
		}
		if cerr := p.Check(); (cerr == nil) != tt.ok {
			t.Errorf("quarantine %s: Check = %v, want ok %v", tt.quarantine, cerr, tt.ok)
		}
		if err != nil && tt.quarantine > 0 {
			if !strings.Contains(err.Error(), "quarantine retention "+tt.quarantine.String()) || !strings.Contains(err.Error(), h.Total.String()) {
				t.Errorf("quarantine %s: error %q does not name both %s and %s", tt.quarantine, err, tt.quarantine, h.Total)
			}
		}
	}
}

func ExamplePolicy_Check() {
	h, _ := Compute(Inputs{
		Redelivery:         &Redelivery{MaxDeliver: 5, BackOff: []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute}},
		DuplicateWindow:    2 * time.Minute,
		NamespaceRetention: 24 * time.Hour,
	})
	fmt.Println(Policy{Keep: 12 * time.Hour, Horizon: h}.Check())
	// Output:
	// retention 12h0m0s is shorter than the safe horizon 25h38m30s (redelivery window 36m30s + duplicate window 2m0s + temporal namespace retention 24h0m0s + margin 1h0m0s): a redelivered copy could arrive after its record was pruned and run again
}

// TestSourceHorizons: the horizon names the source whose copies can arrive
// latest, and a JetStream consumer without a delivery limit has no horizon
// (ErrNoHorizon), so the worker refuses to start with it.
func TestSourceHorizons(t *testing.T) {
	h, err := Compute(Inputs{NamespaceRetention: time.Hour, Sources: []SourceHorizon{
		{Source: "a", Redelivery: time.Minute}, {Source: "b", Redelivery: time.Minute, DuplicateWindow: time.Minute},
	}})
	if err != nil || h.Source != "b" || h.Redelivery+h.DuplicateWindow != 2*time.Minute || !strings.Contains(h.String(), "source b") {
		t.Fatalf("horizon %s, %v; want source b's 2m", h, err)
	}
	if _, err := JetStreamHorizon("jetstream", Redelivery{AckWait: time.Second, MaxDeliver: -1}, time.Minute); !errors.Is(err, ErrNoHorizon) || !errors.Is(err, ErrUnbounded) {
		t.Fatalf("unbounded consumer: err = %v, want ErrNoHorizon", err)
	}
	js, err := JetStreamHorizon("jetstream", Redelivery{AckWait: 30 * time.Second, MaxDeliver: 4}, 2*time.Minute)
	if err != nil || js.Total() != 4*time.Minute {
		t.Fatalf("jetstream horizon %+v, %v; want 4m", js, err)
	}
}
