package identity

import (
	"crypto/sha256"
	"encoding/hex"
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
	if k := MustKey(EffectRefundEmail, "evt_91c2"); k != "refundemail:evt_91c2" {
		t.Fatalf("refund receipt key = %q", k)
	}
	if k := MustKey(EffectOrderEmail, "evt_91c2"); k != "orderemail:evt_91c2" {
		t.Fatalf("order receipt's other key = %q", k)
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
		if re1 := MustKey(EffectRefundEmail, id1); re1 == MustKey(EffectEmail, id1) || re1 == MustKey(EffectRefund, id1) {
			t.Fatalf("refund receipt shares key %q", re1)
		}
		if oe1 := MustKey(EffectOrderEmail, id1); oe1 == MustKey(EffectEmail, id1) || oe1 == MustKey(EffectRefundEmail, id1) {
			t.Fatalf("order receipt's other key shares key %q", oe1)
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

func TestValidateNamespace(t *testing.T) {
	for _, ns := range []string{"", "eu", "prod-eu_1.a", strings.Repeat("N", MaxNamespaceLen)} {
		if err := ValidateNamespace(ns); err != nil {
			t.Errorf("ValidateNamespace(%q) = %v", ns, err)
		}
	}
	for ns, want := range map[string]string{
		"eu/1":                           "character '/' at position 2",
		"eu:1":                           "character ':' at position 2",
		"eu 1":                           "character ' ' at position 2",
		"é":                              "position 0",
		strings.Repeat("n", 65):          "65 characters, the limit is 64",
		"payment:evt_1":                  "character ':'",
		strings.Repeat("n", 64) + "/abc": "characters, the limit is 64",
	} {
		err := ValidateNamespace(ns)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateNamespace(%q) = %v, want an error containing %q", ns, err, want)
		}
	}
}

func TestScope(t *testing.T) {
	if k, err := Scope("", "payment:evt_1"); err != nil || k != "payment:evt_1" {
		t.Fatalf("no namespace: %q, %v; want the key unchanged", k, err)
	}
	if k, err := Scope("eu", "payment:evt_1"); err != nil || k != "eu/payment:evt_1" {
		t.Fatalf("eu: %q, %v", k, err)
	}
	for _, bad := range []string{"payment", "payment:", "eu/payment:evt_1", "Pay:evt_1", ":evt_1"} {
		if k, err := Scope("eu", bad); err == nil {
			t.Errorf("Scope(eu, %q) = %q, want an error", bad, k)
		}
	}
	if _, err := Scope("e/u", "payment:evt_1"); err == nil {
		t.Error("a namespace with '/' was accepted")
	}
}

// TestScopeFitsStripe: a 255-character message ID, whose key is plain
// ("email:" + 249 characters fits) or already hashed, scoped by the longest
// namespace, still fits Stripe's 255 characters, by Key's own shortening.
func TestScopeFitsStripe(t *testing.T) {
	ns := strings.Repeat("n", MaxNamespaceLen)
	for _, id := range []string{strings.Repeat("m", 249), strings.Repeat("m", 255), strings.Repeat("m", 200)} {
		for _, e := range []Effect{EffectPayment, EffectPaymentIntent, EffectEmail, EffectRefund, EffectRefundEmail, EffectOrderEmail} {
			key := MustKey(e, id)
			scoped, err := Scope(ns, key)
			if err != nil {
				t.Fatalf("Scope(%s, %d-char id): %v", e, len(id), err)
			}
			if len(scoped) > MaxKeyLen {
				t.Fatalf("scoped %s key of a %d-char id is %d characters", e, len(id), len(scoped))
			}
			if !strings.HasPrefix(scoped, ns+"/"+string(e)+":") {
				t.Fatalf("scoped key %q", scoped)
			}
			// Hashed or not, the scoped key depends on the message ID only,
			// not on whether Key hashed it already.
			sum := sha256.Sum256([]byte(id))
			hashed := ns + "/" + string(e) + ":~" + hex.EncodeToString(sum[:])
			if plain := ns + "/" + string(e) + ":" + id; len(plain) <= MaxKeyLen {
				if scoped != plain {
					t.Fatalf("scoped = %q, want %q", scoped, plain)
				}
			} else if scoped != hashed {
				t.Fatalf("scoped = %q, want the hashed form %q", scoped, hashed)
			}
		}
	}
}

// FuzzScope checks that scoped keys fit, are deterministic, and never
// collide across namespaces, message IDs or with an unscoped key.
func FuzzScope(f *testing.F) {
	f.Add("eu", "us", "evt_1", "evt_2")
	f.Add(strings.Repeat("n", 64), "n", strings.Repeat("z", 255), strings.Repeat("z", 254))
	f.Add("a", "a.b", "x:y", "x")
	f.Fuzz(func(t *testing.T, ns1, ns2, id1, id2 string) {
		if ns1 == "" || ValidateNamespace(ns1) != nil || ValidateMessageID(id1) != nil {
			return
		}
		k1 := MustKey(EffectPayment, id1)
		s1, err := Scope(ns1, k1)
		if err != nil || len(s1) > MaxKeyLen {
			t.Fatalf("Scope(%q, %q) = %q (%d), %v", ns1, k1, s1, len(s1), err)
		}
		if again, _ := Scope(ns1, k1); again != s1 {
			t.Fatalf("not deterministic: %q vs %q", s1, again)
		}
		if s1 == k1 || strings.HasPrefix(s1, "payment:") {
			t.Fatalf("scoped key %q equals an unscoped one", s1)
		}
		if ValidateNamespace(ns2) != nil || ValidateMessageID(id2) != nil || (ns1 == ns2 && id1 == id2) {
			return
		}
		s2, err := Scope(ns2, MustKey(EffectPayment, id2))
		if err != nil {
			t.Fatal(err)
		}
		if s2 == s1 {
			t.Fatalf("(%q, %q) and (%q, %q) share the scoped key %q", ns1, id1, ns2, id2, s1)
		}
		if s1e, _ := Scope(ns1, MustKey(EffectEmail, id1)); s1e == s1 {
			t.Fatalf("payment and email share the scoped key %q", s1)
		}
	})
}
