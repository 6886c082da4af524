package soak

import (
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestDrainBusyProbes: the drain's probes spread over 90% of its expected
// time, a twentieth of the limit apart, at least the other phases' count
// (closer, then, but never closer than their spacing); a count or a
// spacing given is kept.
func TestDrainBusyProbes(t *testing.T) {
	for _, tt := range []struct {
		cfg   DrainConfig
		n     int
		every time.Duration
	}{
		{DrainConfig{Limit: 60}, 225, 333333333 * time.Nanosecond},                            // 5,000 in 83 s
		{DrainConfig{Limit: 20, Backlog: 10000}, 450, time.Second},                            // 10,000 in 500 s
		{DrainConfig{Limit: 20, Backlog: 2000}, 100, 900 * time.Millisecond},                  // 90 s: 90 at 1 s are too few
		{DrainConfig{Limit: 20, Backlog: 1}, 100, 250 * time.Millisecond},                     // no drain to spread over
		{DrainConfig{Limit: 20, Backlog: 2000, BusyProbes: 300}, 300, 300 * time.Millisecond}, // a count given
		{DrainConfig{Limit: 20, Backlog: 2000, BusyEvery: 2 * time.Second}, 100, 2 * time.Second},
		{DrainConfig{Limit: 20, Backlog: 2000, BusyProbes: 10, BusyEvery: time.Second}, 10, time.Second},
	} {
		c := tt.cfg
		c.setDefaults()
		if c.BusyProbes != tt.n || c.BusyEvery != tt.every {
			t.Errorf("%+v: %d busy probes every %s, want %d every %s", tt.cfg, c.BusyProbes, c.BusyEvery, tt.n, tt.every)
		}
	}
}

// TestProbesBefore: only the probes sent before the drain's end count;
// the first is kept apart whether or not it counts, and the slowest's
// timeline only with its probe.
func TestProbesBefore(t *testing.T) {
	t0 := time.Now()
	l := latencies{slowest: "late", slowestSent: t0.Add(3 * time.Second)}
	for i, d := range []time.Duration{70, 20, 30, 90} {
		at := time.Duration(i) * time.Second
		l.total, l.sentAt, l.sent = append(l.total, d*time.Millisecond), append(l.sentAt, at), append(l.sent, t0.Add(at))
		l.intake, l.work, l.start, l.created = append(l.intake, d), append(l.work, d), append(l.start, d), append(l.created, d)
		l.task, l.refund, l.receipt = append(l.task, d), append(l.refund, d), append(l.receipt, d)
	}
	kept, first := l.before(t0.Add(2500 * time.Millisecond))
	if first != 70*time.Millisecond {
		t.Errorf("first = %s, want 70ms", first)
	}
	if len(kept.total) != 3 || kept.total[2] != 30*time.Millisecond || len(kept.receipt) != 3 || kept.slowest != "" {
		t.Errorf("kept %v (receipts %d, slowest %q), want the first three and no slowest", kept.total, len(kept.receipt), kept.slowest)
	}
}

// TestProbesSentFrom: the settled probes are those sent at or after the
// offset, in order, with their splits; none at all past the last, all from
// zero or before it.
func TestProbesSentFrom(t *testing.T) {
	var l latencies
	for i, d := range []time.Duration{400, 300, 20, 30, 25} {
		l.total, l.sentAt = append(l.total, d*time.Millisecond), append(l.sentAt, time.Duration(i)*time.Second)
		l.refund = append(l.refund, d)
	}
	got := l.sentFrom(2 * time.Second)
	if len(got.total) != 3 || got.total[0] != 20*time.Millisecond || got.total[2] != 25*time.Millisecond || len(got.refund) != 3 || p99(got.total) != 30*time.Millisecond {
		t.Errorf("sentFrom(2s) = %v (refunds %v), want the last three, p99 30ms", got.total, got.refund)
	}
	if got := l.sentFrom(5 * time.Second); len(got.total) != 0 {
		t.Errorf("sentFrom(5s) = %v, want none", got.total)
	}
	if got := l.sentFrom(-time.Second); len(got.total) != 5 {
		t.Errorf("sentFrom(-1s) = %v, want all five", got.total)
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
	one := latencies{total: ms(12), sentAt: ms(0), intake: ms(1), start: ms(2), refund: ms(6), receipt: ms(3)}
	if got, want := one.five(), "12ms at 0s (inbox 1, claim 2, refund 6, receipt 3 ms)"; got != want {
		t.Errorf("five() of one = %q, want %q", got, want)
	}
	one.toTask, one.toStripe, one.atStripe = ms(0), ms(4), ms(1)
	if got, want := one.five(), "12ms at 0s (inbox 1, claim 2, refund 6 [to its task 0, to stripe 4, stripe 1, to the record 1], receipt 3 ms)"; got != want {
		t.Errorf("five() of one split at Stripe = %q, want %q", got, want)
	}
	// A refund claimed at intake: the claim precedes the workflow's task.
	one.start, one.refund, one.toTask, one.toStripe = ms(0), ms(8), ms(3), ms(3)
	if got, want := one.five(), "12ms at 0s (inbox 1, claim 0, refund 8 [to its task 3, to stripe 3, stripe 1, to the record 1], receipt 3 ms)"; got != want {
		t.Errorf("five() of one claimed at intake = %q, want %q", got, want)
	}
}

// TestStripeCallsNotesEachRefundOnce: StripeCalls notes a message's first
// refund request (a namespaced key too), not its retries, and nothing of
// other requests; every request reaches the simulator.
func TestStripeCallsNotesEachRefundOnce(t *testing.T) {
	var served int
	c := &StripeCalls{Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })}
	send := func(method, path, key string) {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Idempotency-Key", key)
		c.ServeHTTP(httptest.NewRecorder(), r)
	}
	send(http.MethodPost, "/v1/refunds", "shop/refund:evt_1")
	first, _, ok := c.Refund("evt_1")
	send(http.MethodPost, "/v1/refunds", "shop/refund:evt_1") // a retry
	send(http.MethodPost, "/v1/payment_intents", "payment:evt_2")
	send(http.MethodGet, "/v1/refunds", "refund:evt_3")
	if again, _, _ := c.Refund("evt_1"); !ok || !again.Equal(first) {
		t.Errorf("evt_1's refund: noted %v (%v), then %v; want its first request's time kept", ok, first, again)
	}
	for _, id := range []string{"evt_2", "evt_3"} {
		if _, _, ok := c.Refund(id); ok {
			t.Errorf("%s noted: only a POST /v1/refunds is a refund", id)
		}
	}
	if served != 4 {
		t.Errorf("the simulator served %d of 4 requests", served)
	}
	if _, _, ok := (*StripeCalls)(nil).Refund("evt_1"); ok {
		t.Error("a nil StripeCalls noted a refund")
	}
}

// TestWaitBound: a refund that waited seconds behind the backlog is past
// the bound in either phase, the busy phase's first probe counted; a wait
// of the probes' usual size is not.
func TestWaitBound(t *testing.T) {
	ok := DrainReport{Backlog: 5000, Drained: 83 * time.Second, BusyMax: 60 * time.Millisecond, BusyFirst: 900 * time.Millisecond,
		Burst: 1000, BurstDrained: 16 * time.Second, BurstMax: 700 * time.Millisecond}
	if w := ok.Waits(); len(w) != 0 {
		t.Errorf("waits under a second reported: %v", w)
	}
	for name, r := range map[string]DrainReport{
		"busy":  {Backlog: 5000, Drained: 83 * time.Second, BusyMax: 40 * time.Second},
		"first": {Backlog: 5000, Drained: 83 * time.Second, BusyFirst: 5100 * time.Millisecond},
		"burst": {Backlog: 5000, Drained: 83 * time.Second, Burst: 1000, BurstDrained: 16 * time.Second, BurstMax: 12 * time.Second},
	} {
		if w := r.Waits(); len(w) != 1 || !strings.Contains(w[0], "past the bound of 3s") {
			t.Errorf("%s: waits %q; want one past the bound of 3s", name, w)
		}
	}
}

// TestDrainBaseline: the drain's ratio is taken against the idle probes
// sent first, as many as the drain counted, not against the burst's
// fewer; a report without them falls back to the burst's baseline.
func TestDrainBaseline(t *testing.T) {
	var l latencies
	// Sent out of order in the rows: the first three sent are 10, 20, 90 ms.
	for _, p := range []struct{ at, d time.Duration }{{2, 90}, {0, 10}, {4, 95}, {1, 20}, {3, 5}} {
		l.total, l.sentAt = append(l.total, p.d*time.Millisecond), append(l.sentAt, p.at*time.Second)
	}
	if got := l.first(3); len(got) != 3 || p99(got) != 90*time.Millisecond {
		t.Errorf("first(3) = %v, want the three sent first (p99 90ms)", got)
	}
	if got := l.first(9); len(got) != 5 {
		t.Errorf("first(9) = %v, want all five", got)
	}
	r := DrainReport{IdleP99: 20 * time.Millisecond, IdleDrainP99: 25 * time.Millisecond, BusyP99: 45 * time.Millisecond}
	if got := r.Ratio(); got != 1.8 {
		t.Errorf("ratio = %v, want 45/25 = 1.8", got)
	}
	r.IdleDrainP99 = 0
	if got := r.Ratio(); got != 2.25 {
		t.Errorf("ratio without the drain's baseline = %v, want 45/20 = 2.25", got)
	}
	for _, c := range []struct {
		idle, drain  time.Duration
		burst, after bool // BurstCounts, DrainCounts
	}{
		{20, 25, true, true}, {24, 48, true, true}, {20, 0, true, true},
		{269, 42, false, true}, // the burst's baseline inflated
		{19, 45, true, false},  // the drain's
	} {
		r := DrainReport{IdleP99: c.idle * time.Millisecond, IdleDrainP99: c.drain * time.Millisecond}
		if r.BurstCounts() != c.burst || r.DrainCounts() != c.after {
			t.Errorf("idle p99s %v and %v: BurstCounts %v, DrainCounts %v; want %v, %v", r.IdleP99, r.IdleDrainP99, r.BurstCounts(), r.DrainCounts(), c.burst, c.after)
		}
	}
	c := DrainConfig{Limit: 20, Backlog: 10000}
	c.setDefaults()
	if want := 20*time.Minute + 450*time.Second; c.Timeout != want {
		t.Errorf("timeout %s, want %s: 20m and the 450 idle probes 1s apart", c.Timeout, want)
	}
}
