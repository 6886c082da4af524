package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestWorkflowID(t *testing.T) {
	tests := []struct {
		consumer, id string
		want         string
		wantErr      string
	}{
		{"order-placed", "evt_91c2", "order-placed/evt_91c2", ""},
		{"order-placed", "a:b.c-d_E9", "order-placed/a:b.c-d_E9", ""},
		{"order-placed", "", "", "message id is empty"},
		{"order-placed", "evt 1", "", "character ' ' at position 3"},
		{"order-placed", "evt/1", "", "character '/' at position 3"},
		{"order-placed", strings.Repeat("a", 256), "", "256 characters, the limit is 255"},
		{"", "evt_1", "", "consumer name is empty"},
		{"Orders", "evt_1", "", "character 'O' at position 0"},
		{"a/b", "evt_1", "", "character '/' at position 1"},
	}
	for _, tt := range tests {
		got, err := WorkflowID(tt.consumer, tt.id)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("WorkflowID(%q, %q) error = %v, want one containing %q", tt.consumer, tt.id, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("WorkflowID(%q, %q) = %q, %v; want %q", tt.consumer, tt.id, got, err, tt.want)
		}
	}
}

func TestKey(t *testing.T) {
	if k := MustKey(EffectPayment, "evt_91c2"); k != "payment:evt_91c2" {
		t.Fatalf("payment key = %q", k)
	}
	if k := MustKey(EffectEmail, "evt_91c2"); k != "email:evt_91c2" {
		t.Fatalf("email key = %q", k)
	}
	if k := MustKey(EffectRefund, "evt_91c2"); k != "refund:evt_91c2" {
		t.Fatalf("refund key = %q", k)
	}
	long := strings.Repeat("x", 255)
	k, err := Key(EffectPayment, long)
	if err != nil {
		t.Fatal(err)
	}
	if len(k) > MaxKeyLen || !strings.HasPrefix(k, "payment:~") {
		t.Fatalf("long key = %q (%d chars)", k, len(k))
	}
	if k2 := MustKey(EffectPayment, long[:254]+"y"); k2 == k {
		t.Fatal("different long IDs gave the same key")
	}
	if _, err := Key("Pay", "evt"); err == nil {
		t.Fatal("upper-case effect accepted")
	}
}

func TestParseWorkflowID(t *testing.T) {
	c, m, err := ParseWorkflowID("order-placed/evt:1/2")
	if err == nil {
		t.Fatalf("accepted a message id with '/': %q %q", c, m)
	}
	c, m, err = ParseWorkflowID("order-placed/evt:1")
	if err != nil || c != "order-placed" || m != "evt:1" {
		t.Fatalf("got %q %q %v", c, m, err)
	}
}

// FuzzIdentity checks that derivation is deterministic, injective and
// round-trips, and that every key fits Stripe's limit.
func FuzzIdentity(f *testing.F) {
	f.Add("order-placed", "evt_91c2", "evt_91c3")
	f.Add("a", strings.Repeat("z", 255), strings.Repeat("z", 254))
	f.Add("x.y", "a:b", "a")
	f.Fuzz(func(t *testing.T, consumer, id1, id2 string) {
		w1, err := WorkflowID(consumer, id1)
		if err != nil {
			if ValidateConsumer(consumer) == nil && ValidateMessageID(id1) == nil {
				t.Fatalf("valid input rejected: %v", err)
			}
			return
		}
		c, m, err := ParseWorkflowID(w1)
		if err != nil || c != consumer || m != id1 {
			t.Fatalf("round trip of %q: %q %q %v", w1, c, m, err)
		}
		p1, err := Key(EffectPayment, id1)
		if err != nil || len(p1) > MaxKeyLen {
			t.Fatalf("Key(%q) = %q, %v", id1, p1, err)
		}
		if again := MustKey(EffectPayment, id1); again != p1 {
			t.Fatalf("not deterministic: %q vs %q", p1, again)
		}
		c1 := MustKey(EffectPaymentIntent, id1)
		if c1 == p1 {
			t.Fatalf("create and confirm keys are both %q", c1)
		}
		if e1 := MustKey(EffectEmail, id1); e1 == p1 {
			t.Fatalf("payment and email share key %q", e1)
		}
		if r1 := MustKey(EffectRefund, id1); r1 == p1 || r1 == MustKey(EffectEmail, id1) {
			t.Fatalf("refund shares key %q", r1)
		}
		if ValidateMessageID(id2) != nil || id1 == id2 {
			return
		}
		if w2, _ := WorkflowID(consumer, id2); w2 == w1 {
			t.Fatalf("workflow ids collide: %q and %q -> %q", id1, id2, w1)
		}
		if c2 := MustKey(EffectPaymentIntent, id2); c2 == c1 || c2 == p1 {
			t.Fatalf("create key %q of %q collides", c2, id2)
		}
		if p2 := MustKey(EffectPayment, id2); p2 == p1 {
			t.Fatalf("keys collide: %q and %q -> %q", id1, id2, p1)
		}
	})
}
