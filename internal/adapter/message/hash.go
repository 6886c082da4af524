package message

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// Hash returns the hex SHA-256 of a canonical form of the message, for
// telling a redelivered copy of a message from a different message that
// reuses its ID.
//
// The canonical form is the JSON object {"data":D,"id":I,"type":T} with no
// whitespace, where D is Data with object keys sorted (by bytes), no
// whitespace, and strings re-escaped in one fixed way. Re-serializing a
// message with different whitespace, key order or string escapes therefore
// leaves its hash unchanged, while changing any value changes it. Numbers are
// compared by their literal text (Decode accepts only integers, whose
// literals are canonical), and values are hashed as received, before
// normalization: "USD" and "usd" hash differently, so a producer that
// changes a value, however harmlessly, is noticed.
//
// Hash never fails. For a Message not produced by Decode whose fields are not
// valid UTF-8 or whose Data is not valid JSON, it hashes the raw bytes of
// the fields instead, in a form that cannot collide with the canonical one.
// A nil Message hashes to "".
func (m *Message) Hash() string {
	if m == nil {
		return ""
	}
	var b bytes.Buffer
	var (
		tree any
		err  *Error
	)
	valid := utf8.ValidString(m.ID) && utf8.ValidString(m.Type) && utf8.Valid(m.Data)
	if valid {
		tree, err = parse(m.Data, false)
		valid = err == nil
	}
	if valid {
		b.WriteString(`{"data":`)
		writeCanonical(&b, tree)
		b.WriteString(`,"id":`)
		writeString(&b, m.ID)
		b.WriteString(`,"type":`)
		writeString(&b, m.Type)
		b.WriteByte('}')
	} else {
		// Starts with "raw:", not "{", and hex never contains ':'.
		b.WriteString("raw:")
		b.WriteString(hex.EncodeToString([]byte(m.ID)))
		b.WriteByte(':')
		b.WriteString(hex.EncodeToString([]byte(m.Type)))
		b.WriteByte(':')
		b.WriteString(hex.EncodeToString(m.Data))
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

// writeCanonical writes v, a tree from parse, in canonical form.
func writeCanonical(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(v))
	case string:
		writeString(b, v)
	case *array:
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case *object:
		members := slices.Clone(v.members)
		slices.SortFunc(members, func(x, y member) int { return strings.Compare(x.key, y.key) })
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, m.key)
			b.WriteByte(':')
			writeCanonical(b, m.val)
		}
		b.WriteByte('}')
	}
}

// writeString writes s, valid UTF-8, as a JSON string.
func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // marshaling a string cannot fail
	b.Write(q)
}
