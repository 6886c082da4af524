package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var codes = map[string]bool{
	CodeTooLarge: true, CodeSyntax: true, CodeNotObject: true, CodeMissing: true,
	CodeType: true, CodeUnknownField: true, CodeDuplicateKey: true, CodeInvalid: true,
	CodeUnknownType: true, CodeEncoding: true,
}

// FuzzDecode checks that Decode never panics, that it reports every failure
// as an *Error with a known code, and that what it accepts survives a round
// trip: re-encoding the OrderPlaced and decoding it again gives the same
// value, and the hash ignores formatting.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validMessage))
	f.Add([]byte(order(map[string]string{"currency": `"USD"`})))
	f.Add([]byte(order(map[string]string{"amount": "19.99"})))
	f.Add([]byte(order(map[string]string{"amount": `1, "amount": 2`})))
	f.Add([]byte(`{"id":"a","type":"order.placed","data":{"x":[[{"y":"\u0000"}]]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Decode(raw, orderPlacedOnly)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if !codes[e.Code] || e.Problem == "" || !strings.HasPrefix(e.Error(), "invalid message: ") {
				t.Fatalf("bad error %#v", e)
			}
			if m != nil {
				t.Fatal("message returned with an error")
			}
			return
		}
		if m.Type != TypeOrderPlaced || orderOf(m) == nil || m.Consumer != ConsumerOrderPlaced {
			t.Fatalf("accepted message %+v", m)
		}
		if !bytes.Equal(m.Raw, raw) {
			t.Fatal("Raw differs from the input")
		}
		h := m.Hash()
		if h2 := m.Hash(); h2 != h || len(h) != 64 {
			t.Fatalf("Hash() = %q then %q", h, h2)
		}

		// Re-encode the typed data; it decodes to the same value.
		data, jerr := json.Marshal(orderOf(m))
		if jerr != nil {
			t.Fatal(jerr)
		}
		env, jerr := json.Marshal(map[string]any{"id": m.ID, "type": m.Type, "data": json.RawMessage(data)})
		if jerr != nil {
			t.Fatal(jerr)
		}
		m2, err := Decode(env, orderPlacedOnly)
		if err != nil {
			t.Fatalf("re-encoded message %s: %v", env, err)
		}
		if *orderOf(m2) != *orderOf(m) || m2.ID != m.ID {
			t.Fatalf("round trip: got %+v, want %+v", orderOf(m2), orderOf(m))
		}
		if orderOf(m).Currency == currencyAsSent(t, m) && m2.Hash() != h {
			t.Fatalf("re-encoded message hashes to %s, want %s", m2.Hash(), h)
		}

		// Re-indent the message as received; the hash is the same.
		var ind bytes.Buffer
		if err := json.Indent(&ind, raw, "", "\t"); err != nil {
			t.Fatal(err)
		}
		if ind.Len() <= MaxSize {
			m3, err := Decode(ind.Bytes(), orderPlacedOnly)
			if err != nil {
				t.Fatalf("indented message: %v", err)
			}
			if m3.Hash() != h {
				t.Fatal("indented message hashes differently")
			}
		}
	})
}

// currencyAsSent returns the currency as it appears in m.Data.
func currencyAsSent(t *testing.T, m *Message) string {
	var d struct{ Currency string }
	if err := json.Unmarshal(m.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d.Currency
}
