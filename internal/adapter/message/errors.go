package message

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Error codes, one per kind of problem. They are stable identifiers meant for
// metrics, quarantine records and tests; the human-readable detail is in
// Error.Problem.
const (
	// CodeTooLarge means the message is larger than MaxSize.
	CodeTooLarge = "too_large"
	// CodeSyntax means the message is not well-formed JSON, is empty, or
	// has data after the top-level object.
	CodeSyntax = "syntax"
	// CodeNotObject means the message is JSON but not a JSON object.
	CodeNotObject = "not_object"
	// CodeMissing means a required field is absent or null.
	CodeMissing = "missing"
	// CodeType means a field has the wrong JSON type, such as a string or a
	// fraction where an integer is required.
	CodeType = "wrong_type"
	// CodeUnknownField means a field that the format does not define is
	// present.
	CodeUnknownField = "unknown_field"
	// CodeDuplicateKey means a key occurs twice in the same object.
	CodeDuplicateKey = "duplicate_key"
	// CodeInvalid means a field has the right type but a value that breaks
	// its rules.
	CodeInvalid = "invalid"
	// CodeUnknownType means the message's type has no route.
	CodeUnknownType = "unknown_type"
	// CodeEncoding means the message is not valid UTF-8 or starts with a byte
	// order mark.
	CodeEncoding = "encoding"
)

// Error describes why a message was rejected. Decode and DecodeStream report
// every bad input as an *Error; use errors.As to get at it.
type Error struct {
	// Field is the JSON path of the offending value ("id", "data.amount",
	// "[i]" for an element, ["key"] for an odd key), "" for the whole
	// message.
	Field string
	// Problem says what is wrong. It may quote a clipped amount or
	// currency, never an email, a payment method or a stringified object:
	// it is logged, and logs carry no personal data.
	Problem string
	// Code is one of the Code constants.
	Code string
	// Oversized describes the whole message when Code is CodeTooLarge: the
	// message itself is not kept, so its size, digest and first bytes are
	// what identifies it.
	Oversized *Oversized
}

// OversizedPrefix is how many leading bytes of a message longer than
// MaxSize are kept, for an operator to recognise it.
const OversizedPrefix = 1024

// Oversized identifies a message longer than MaxSize without keeping it.
type Oversized struct {
	// Size is the message's length in bytes (without a line terminator).
	Size int64
	// SHA256 is the digest of the whole message: two different oversized
	// messages have different digests, two copies of one the same.
	SHA256 [32]byte
	// Prefix is the message's first OversizedPrefix bytes.
	Prefix []byte
}

// Error returns "invalid message: <field>: <problem>", or
// "invalid message: <problem>" when Field is empty.
func (e *Error) Error() string {
	if e.Field == "" {
		return "invalid message: " + e.Problem
	}
	return "invalid message: " + e.Field + ": " + e.Problem
}

func newError(code, field, format string, args ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...), Code: code}
}

func tooLarge(o *Oversized) *Error {
	e := newError(CodeTooLarge, "", "message is %d bytes, the limit is %d", o.Size, MaxSize)
	e.Oversized = o
	return e
}

// oversized describes raw, a whole message longer than MaxSize.
func oversized(raw []byte) *Oversized {
	return &Oversized{Size: int64(len(raw)), SHA256: sha256.Sum256(raw), Prefix: bytes.Clone(raw[:min(len(raw), OversizedPrefix)])}
}

// maxEcho bounds how much of an input value is repeated in an error, so that
// a hostile message cannot blow up logs.
const maxEcho = 64

// clip shortens s to at most maxEcho bytes, on a rune boundary, and reports
// whether it did.
func clip(s string) (string, bool) {
	if len(s) <= maxEcho {
		return s, false
	}
	n := maxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// quote returns s as a Go-quoted string, clipped, so that control characters
// and invalid bytes are visible in errors and logs.
func quote(s string) string {
	c, clipped := clip(s)
	q := strconv.Quote(c)
	if clipped {
		q += "…"
	}
	return q
}

// literal returns a number literal for an error message, clipped.
func literal(s string) string {
	c, clipped := clip(s)
	if clipped {
		c += "…"
	}
	return c
}
