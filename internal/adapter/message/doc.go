// Package message defines the envelope of the messages effectively consumes,
// and decodes them strictly: a message is either accepted whole, typed and
// validated, or rejected with an *Error that names the offending field, so
// that nothing half-understood ever reaches a payment provider.
//
// # Format
//
// A message is a JSON object of exactly three fields:
//
//	{"id": "evt_91c2", "type": "order.placed",
//	 "data": {"order_id": 42, "amount": 1999, "currency": "usd",
//	          "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}
//
// The fields are:
//
//   - id: a string of 1 to 255 characters of A-Z a-z 0-9 _ - . : (see
//     identity.ValidateMessageID). Every redelivered copy of a message
//     carries the same id; it is what makes the side effects happen once.
//   - type: a string naming a known message type, which routes the message
//     to its consumer. Which types exist is the caller's Types: the product's
//     is the route registry (internal/intake/route), which knows "order.placed"
//     (consumer "order-placed") and "order.refund_requested" (consumer
//     "order-refund").
//   - data: an object whose fields depend on the type; for order.placed,
//     see OrderPlaced, for order.refund_requested, RefundRequested. Each
//     type's Schema validates it into Message.Value.
//
// # Decisions
//
// Size and encoding. A message may be at most MaxSize (64 KiB) bytes; a
// larger one is rejected before it is parsed. It must be valid UTF-8 and
// must not start with a byte order mark (RFC 8259 forbids sending one;
// rejecting it rather than stripping it keeps Message.Raw exactly the bytes
// that were parsed). Whitespace around the object is allowed; anything else
// after it is a syntax error.
//
// Duplicate keys. encoding/json silently keeps the last of two equal keys,
// so {"amount": 1, "amount": 100000} could be checked by one component and
// charged by another with different values. Decode walks the message token
// by token first and rejects a key that occurs twice in the same object, at
// any depth, comparing keys after unescaping ("\u0061mount" is "amount").
// Keys are matched case-sensitively: "Amount" is an unknown field, not a
// spelling of "amount" as encoding/json would have it.
//
// Unknown fields are rejected, at the top level and in the data of every
// known type. A field such as "amount_decimal" or "capture": false might
// change the meaning of a charge, and silently ignoring it would do the
// wrong thing effectively once. A producer that needs a new field must add
// it here first.
//
// Missing and null. A required field that is absent or null is reported
// with CodeMissing; null is not a value of any field. A value of the wrong
// JSON type is CodeType, and a value of the right type that breaks a rule is
// CodeInvalid.
//
// Numbers must be JSON integer literals: 19.99, 1e3, 1.0, "1999", true and
// null are all rejected, as are zero, negative numbers and values above the
// field's limit. Amounts are integers in minor units of the currency, at
// most 99999999 (Stripe's limit); order IDs are at most 2^53-1, so that
// they survive JavaScript and other float-based JSON implementations.
//
// Strings must not contain control characters (U+0000 to U+001F and
// U+007F) in any field. JSON already forbids raw U+0000 to U+001F in a
// string (CodeSyntax); escaped ones such as "\u0000", and U+007F however
// written, are rejected with CodeInvalid.
//
// Currencies are ISO 4217 codes from a fixed list. They are accepted in any
// letter case and normalized to lower case in OrderPlaced.Currency (Data
// and Raw keep what was sent). E-mail addresses must be a single bare ASCII
// address; see ValidateEmail.
//
// # Errors
//
// Every rejection is an *Error with a Code (one of the Code constants),
// the JSON path of the offending value in Field ("id", "data.amount", or ""
// for the whole message), and a Problem that says what was wrong and, where
// it helps, what was received. Received values are quoted and clipped, so
// that hostile input cannot forge or flood log lines. When a message has
// several problems, the first found is reported: structure (size, encoding,
// syntax, duplicate keys), then unknown top-level fields, id, type, data,
// and the data's fields (unknown fields first, then in declaration order).
//
// # Streams
//
// DecodeStream reads a file or pipe of messages: either a single message,
// which may be pretty-printed over several lines, or JSON lines. The first
// non-blank line decides which. A bad line in JSON lines is reported and
// decoding carries on, so one bad message does not hide the others.
//
// # Hash
//
// Message.Hash identifies a message's content, ignoring formatting, so that
// the inbox can tell a redelivered copy from a different message reusing an
// ID.
package message
