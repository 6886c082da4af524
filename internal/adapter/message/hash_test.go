package message

import (
	"encoding/hex"
	"testing"
)

func mustDecode(t *testing.T, raw string) *Message {
	t.Helper()
	m, err := Decode([]byte(raw), testTypes)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestHash(t *testing.T) {
	base := mustDecode(t, validMessage).Hash()
	if b, err := hex.DecodeString(base); err != nil || len(b) != 32 {
		t.Fatalf("Hash() = %q, want 64 hex digits", base)
	}

	same := []string{
		order(nil),
		// Keys reordered at both levels, other whitespace.
		"{\r\n\t\"data\" : {\"payment_method\":\"pm_card_visa\",\"customer_email\":\"ada@example.com\"," +
			"\"currency\":\"usd\",\"amount\":1999,\"order_id\":42},\n\"type\":\"order.placed\",\"id\":\"evt_91c2\"}\n",
		// Strings escaped differently.
		order(map[string]string{"currency": `"\u0075sd"`, "customer_email": `"ada\u0040example.com"`}),
	}
	for _, raw := range same {
		if h := mustDecode(t, raw).Hash(); h != base {
			t.Errorf("Hash of %q = %s, want %s as for the example", raw, h, base)
		}
	}

	different := []string{
		order(map[string]string{"amount": "2000"}),
		order(map[string]string{"order_id": "43"}),
		order(map[string]string{"currency": `"eur"`}),
		order(map[string]string{"currency": `"USD"`}), // hashed as received
		order(map[string]string{"customer_email": `"bob@example.com"`}),
		order(map[string]string{"payment_method": `"pm_card_mastercard"`}),
		envelope(`"evt_91c3"`, `"order.placed"`, dataWith(nil)),
	}
	seen := map[string]string{base: validMessage}
	for _, raw := range different {
		h := mustDecode(t, raw).Hash()
		if prev, ok := seen[h]; ok {
			t.Errorf("Hash of %q equals that of %q", raw, prev)
		}
		seen[h] = raw
	}
}

func TestHashCanonicalForm(t *testing.T) {
	// The canonical form is documented, so pin it.
	m := mustDecode(t, validMessage)
	canon := `{"data":{"amount":1999,"currency":"usd","customer_email":"ada@example.com","order_id":42,"payment_method":"pm_card_visa"},"id":"evt_91c2","type":"order.placed"}`
	if got, want := m.Hash(), sha256Hex(canon); got != want {
		t.Errorf("Hash() = %s, want SHA-256 of %s = %s", got, canon, want)
	}
}

func TestHashOfHandMadeMessages(t *testing.T) {
	valid := &Message{ID: "a", Type: "t", Data: []byte(`{"b":[1,{"d":null,"c":true}],"a":"x"}`)}
	reordered := &Message{ID: "a", Type: "t", Data: []byte(` { "a" : "x", "b" : [ 1, { "c": true, "d": null } ] } `)}
	if valid.Hash() != reordered.Hash() {
		t.Error("nested data: Hash differs for reordered keys")
	}
	if got, want := valid.Hash(), sha256Hex(`{"data":{"a":"x","b":[1,{"c":true,"d":null}]},"id":"a","type":"t"}`); got != want {
		t.Errorf("nested data: Hash() = %s, want %s", got, want)
	}
	var seen = map[string]bool{}
	for _, m := range []*Message{
		valid,
		{ID: "a", Type: "t", Data: []byte(`{"a":1,"a":2}`)},
		{ID: "a", Type: "t", Data: []byte(`{"a":`)},
		{ID: "a", Type: "t", Data: []byte("\"\xff\"")},
		{ID: "a", Type: "t", Data: []byte("\"\xfe\"")},
		{ID: "a", Type: "t"},
		{ID: "a\xff", Type: "t", Data: []byte(`{}`)},
	} {
		h := m.Hash()
		if seen[h] {
			t.Errorf("Hash of %+v collides", m)
		}
		seen[h] = true
	}
	if h := (*Message)(nil).Hash(); h != "" {
		t.Errorf("nil Hash() = %q", h)
	}
}
