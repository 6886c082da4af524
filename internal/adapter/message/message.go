package message

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/effectively/effectively/internal/leaf/identity"
)

// MaxSize is the largest message accepted, in bytes. Larger payloads are
// rejected before any parsing.
const MaxSize = 64 << 10

// Message is a decoded and validated message.
type Message struct {
	// ID identifies the message; every redelivered copy has the same ID.
	// It satisfies identity.ValidateMessageID.
	ID string
	// Type is the message type, such as TypeOrderPlaced.
	Type string
	// Consumer is the consumer that handles Type, from the type's route.
	Consumer string
	// Data is the data object exactly as received.
	Data json.RawMessage
	// Raw is the whole message exactly as received, kept for the inbox
	// and for quarantine.
	Raw []byte

	// Value is the validated data, as the type's Schema returns it: an
	// *OrderPlaced for order.placed, a *RefundRequested for
	// order.refund_requested.
	Value any

	// Claimed is the claim the intake took for the message in the
	// transaction that recorded it (the order's payment, for order.placed;
	// the refund, for order.refund_requested), nil for none. Set by the
	// intake, never decoded.
	Claimed *Claim
}

// Claim is a ledger claim the intake took for a message in the transaction
// that recorded it: its fencing token and when it was taken, and for a
// refund the PaymentIntent and currency its refunds row records.
type Claim struct {
	Token           int32     `json:"token"`
	At              time.Time `json:"at"`
	PaymentIntentID string    `json:"payment_intent_id,omitempty"`
	Currency        string    `json:"currency,omitempty"`
}

// Schema validates the data object of one message type and returns it as a
// typed value. The schemas live in this package, one file per type, because
// they read the strict parse tree that Decode builds; which types exist, and
// which consumer handles each, is the business of Types.
type Schema struct {
	typ    string
	decode func(data *object) (any, *Error)
}

// Type is the message type the schema validates.
func (s Schema) Type() string { return s.typ }

// Valid reports whether s is a schema of this package rather than the zero
// value.
func (s Schema) Valid() bool { return s.decode != nil }

// Types tells Decode which message types exist. The product's is the route
// registry (internal/intake/route): the one place that names every message type.
type Types interface {
	// Lookup returns the consumer that handles typ and the schema of its
	// data; ok is false for an unknown type.
	Lookup(typ string) (consumer string, schema Schema, ok bool)
	// Names returns the known types, sorted, for error messages.
	Names() []string
}

// topFields are the fields a message may have.
var topFields = []string{"id", "type", "data"}

// utf8BOM is the UTF-8 encoding of U+FEFF.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Decode parses and validates one message of one of types. Every bad input
// is reported as an *Error naming the offending field; Decode never panics.
// raw is not retained: the returned Message holds a copy.
//
// See the package documentation for the accepted format.
func Decode(raw []byte, types Types) (*Message, error) {
	if len(raw) > MaxSize {
		return nil, tooLarge(oversized(raw))
	}
	m, err := decode(bytes.Clone(raw), types)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decode is Decode for a raw it may keep, of at most MaxSize bytes.
func decode(raw []byte, types Types) (*Message, *Error) {
	if len(raw) > MaxSize {
		return nil, tooLarge(oversized(raw))
	}
	if bytes.HasPrefix(raw, utf8BOM) {
		return nil, newError(CodeEncoding, "", "message starts with a UTF-8 byte order mark, which is not accepted")
	}
	if !utf8.Valid(raw) {
		return nil, newError(CodeEncoding, "", "message is not valid UTF-8: bad byte at offset %d", invalidUTF8At(raw))
	}
	tree, err := parse(raw, true)
	if err != nil {
		return nil, err
	}
	top, ok := tree.(*object)
	if !ok { // parse with wantObject returns an object or an error
		return nil, newError(CodeNotObject, "", "a message must be a JSON object, got %s", describeWhole(tree))
	}
	for _, mb := range top.members {
		if !contains(topFields, mb.key) {
			return nil, newError(CodeUnknownField, joinPath("", mb.key), "unknown field; a message has only the fields %s", strings.Join(topFields, ", "))
		}
	}

	m := &Message{Raw: raw}
	if m.ID, err = stringField(top, "", "id"); err != nil {
		return nil, err
	}
	if e := identity.ValidateMessageID(m.ID); e != nil {
		return nil, newError(CodeInvalid, "id", "%s", strings.TrimPrefix(e.Error(), identity.ErrInvalid.Error()+": "))
	}
	if m.Type, err = stringField(top, "", "type"); err != nil {
		return nil, err
	}
	consumer, schema, known := types.Lookup(m.Type)
	if !known || !schema.Valid() {
		return nil, newError(CodeUnknownType, "type", "unknown type %s; known types are %s", quote(m.Type), strings.Join(types.Names(), ", "))
	}
	m.Consumer = consumer

	v, err := required(top, "", "data")
	if err != nil {
		return nil, err
	}
	data, ok := v.(*object)
	if !ok {
		return nil, newError(CodeType, "data", "must be an object, got %s", describeWhole(v))
	}
	m.Data = json.RawMessage(top.find("data").raw)
	v, derr := schema.decode(data)
	if derr != nil {
		return nil, derr
	}
	m.Value = v
	return m, nil
}

// invalidUTF8At returns the offset of the first invalid UTF-8 sequence in b.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// isAlnum reports whether c is an ASCII letter or digit.
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// contains reports whether list contains s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// required returns the value of the field name of obj (at path parent),
// reporting an absent or null field as CodeMissing.
func required(obj *object, parent, name string) (any, *Error) {
	path := joinPath(parent, name)
	v, ok := obj.get(name)
	if !ok {
		return nil, newError(CodeMissing, path, "required field is missing")
	}
	if v == nil {
		return nil, newError(CodeMissing, path, "required field is null")
	}
	return v, nil
}

// stringField returns the required string field name of obj, rejecting
// control characters.
func stringField(obj *object, parent, name string) (string, *Error) {
	path := joinPath(parent, name)
	v, err := required(obj, parent, name)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", newError(CodeType, path, "must be a string, got %s", describe(v))
	}
	if i := controlAt(s); i >= 0 {
		return "", newError(CodeInvalid, path, "contains control character %q at byte %d", s[i], i)
	}
	return s, nil
}

// controlAt returns the index of the first control character (U+0000 to
// U+001F or U+007F) in s, or -1.
func controlAt(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7F {
			return i
		}
	}
	return -1
}
