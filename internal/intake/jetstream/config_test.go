package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake/retention"
	"github.com/effectively/effectively/internal/intake/route"
)

func TestPublishSubject(t *testing.T) {
	tests := []struct {
		filter, typ, want string
		err               bool
	}{
		{"effectively.messages.>", "order.placed", "effectively.messages.order.placed", false},
		{"orders", "order.placed", "orders", false},
		{"effectively.messages.>", "", "effectively.messages.unknown", false},
		{"effectively.*.>", "order.placed", "", true},
		{"effectively.messages.*", "order.placed", "", true},
		{"effectively..>", "order.placed", "", true},
		{"effectively.messages.>", "bad type", "", true},
		{"effectively.messages.>", "order.>", "", true},
		{"", "order.placed", "", true},
	}
	for _, tt := range tests {
		got, err := PublishSubject(tt.filter, tt.typ)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("PublishSubject(%q, %q) = %q, %v; want %q, error %v", tt.filter, tt.typ, got, err, tt.want, tt.err)
		}
	}
}

func TestMsgIDSeparatesPayloads(t *testing.T) {
	decode := func(s string) *message.Message {
		m, err := route.Default().Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const tmpl = `{"id": "evt_1", "type": "order.placed", "data": {"order_id": 1, "amount": AMOUNT, "currency": "usd", "customer_email": "a@example.com", "payment_method": "pm_card_visa"}}`
	a := decode(strings.Replace(tmpl, "AMOUNT", "100", 1))
	reformatted := decode(strings.ReplaceAll(strings.Replace(tmpl, "AMOUNT", "100", 1), ", ", ","))
	b := decode(strings.Replace(tmpl, "AMOUNT", "200", 1))
	if MsgID(a) != MsgID(reformatted) {
		t.Errorf("the same message, formatted differently, got two IDs: %s, %s", MsgID(a), MsgID(reformatted))
	}
	if MsgID(a) == MsgID(b) {
		t.Errorf("different payloads under one ID share Nats-Msg-Id %s: the broker would drop the mismatch", MsgID(a))
	}
	if !strings.HasPrefix(MsgID(a), "evt_1#") {
		t.Errorf("MsgID = %s", MsgID(a))
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := map[string]Config{
		"unlimited":          {MaxDeliver: -1},
		"too few deliveries": {MaxDeliver: 3, BackOff: []time.Duration{time.Second, time.Second}},
		"zero backoff":       {BackOff: []time.Duration{0}},
		"stream with dot":    {Stream: "a.b"},
		"durable with space": {Durable: "a b"},
		"bad subject":        {Subject: "a.>.b"},
	}
	for name, c := range tests {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRedeliveryMatchesTheBroker checks that the per-delivery ack waits the
// consumer uses for its Nak delays are the ones the horizon sums.
func TestRedeliveryMatchesTheBroker(t *testing.T) {
	c := Config{AckWait: 30 * time.Second, MaxDeliver: 5, BackOff: []time.Duration{time.Minute, 5 * time.Minute}}.withDefaults()
	var sum time.Duration
	for n := 1; n <= c.MaxDeliver; n++ {
		sum += c.ackWaitOf(uint64(n))
	}
	w, err := retention.Redelivery{AckWait: c.AckWait, MaxDeliver: c.MaxDeliver, BackOff: c.ackWaits()}.Window()
	if err != nil {
		t.Fatal(err)
	}
	if sum != w || w != 30*time.Second+time.Minute+3*5*time.Minute {
		t.Fatalf("consumer waits sum to %s, horizon window %s", sum, w)
	}
	none := Config{AckWait: 10 * time.Second, MaxDeliver: 3, BackOff: []time.Duration{}}.withDefaults()
	if none.ackWaits() != nil || none.ackWaitOf(3) != 10*time.Second {
		t.Fatalf("without backoff: %v, %s", none.ackWaits(), none.ackWaitOf(3))
	}
}
