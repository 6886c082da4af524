// Package identity derives every identifier that effectively uses to make a
// repeated message harmless: the Temporal workflow ID of a message and the
// idempotency key of each external effect.
//
// Both are pure functions of the message's identity, never of the clock, the
// attempt number or a random source, so every redelivered copy of a message,
// and every retry of an activity, arrives at the same workflow and the same
// provider key:
//
//	WorkflowID("order-placed", "evt_91c2")  == "order-placed/evt_91c2"
//	Key(EffectPayment, "evt_91c2")           == "payment:evt_91c2"
//	Key(EffectPaymentIntent, "evt_91c2")     == "paymentintent:evt_91c2"
//
// A payment takes two Stripe requests, each with its own key: the
// PaymentIntent is created (unconfirmed) under "paymentintent:<id>" and
// confirmed under "payment:<id>", which is also the key of the payment's
// ledger row; its ID is recorded in Postgres with the confirmation's outcome.
// A retry's create replays the same PaymentIntent under its key.
//
// The encodings are injective: consumer names and effect names may not contain
// the separator, so two different inputs never produce the same output.
//
// A key namespace (EFFECTIVELY_KEY_NAMESPACE) scopes the keys that reach a
// provider: Scope("eu", "payment:evt_91c2") == "eu/payment:evt_91c2". The
// Postgres ledger and the workflows keep the unscoped keys; only the
// provider clients (internal/adapter/payment, internal/adapter/email) scope them, so that
// deployments sharing one Stripe account never replay each other's keys.
package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// MaxMessageIDLen is the longest message ID accepted.
const MaxMessageIDLen = 255

// MaxKeyLen is the longest idempotency key Stripe accepts. A key that would
// be longer is shortened to a hashed form (see Key).
const MaxKeyLen = 255

// MaxConsumerLen bounds consumer names, which are part of workflow IDs.
const MaxConsumerLen = 64

// MaxNamespaceLen bounds a key namespace. With it, the separator, the
// longest effect name and a hashed message ID, a scoped key stays far
// below MaxKeyLen (see Scope).
const MaxNamespaceLen = 64

// NamespaceSeparator separates a key namespace from the key it scopes. It
// occurs in no key and no namespace, so the first one splits a scoped key.
const NamespaceSeparator = "/"

// Effect names one kind of external side effect. It prefixes the idempotency
// key, so the payment and the email of one message never share a key.
type Effect string

// The effects effectively performs.
const (
	// EffectPayment keys the payment's ledger row and the Stripe request
	// that confirms its PaymentIntent.
	EffectPayment Effect = "payment"
	// EffectPaymentIntent keys the Stripe request that creates the
	// payment's PaymentIntent, unconfirmed.
	EffectPaymentIntent Effect = "paymentintent"
	// EffectEmail keys the order receipt's ledger row; it travels to
	// SendGrid in custom_args.
	EffectEmail Effect = "email"
	// EffectRefundEmail keys the refund receipt's ledger row, apart from
	// the order receipt's: an order.placed and an order.refund_requested
	// may carry the same message ID. Refund receipts claimed before it
	// existed keep their row under EffectEmail (see activities).
	EffectRefundEmail Effect = "refundemail"
	// EffectOrderEmail keys an order receipt's ledger row when
	// "email:<message id>" is held by another consumer's row: a refund
	// receipt of the same message ID that a release before
	// EffectRefundEmail recorded there (see store.EmailClaim.AltKey).
	EffectOrderEmail Effect = "orderemail"
	// EffectRefund is a Stripe Refund: "refund:<message id>" is its
	// Idempotency-Key.
	EffectRefund Effect = "refund"
)

// ErrInvalid is wrapped by every error this package returns.
var ErrInvalid = errors.New("invalid identity")

// ValidateMessageID reports whether id is usable as a message ID: 1 to 255
// characters of A-Z a-z 0-9 _ - . :
func ValidateMessageID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: message id is empty", ErrInvalid)
	}
	if len(id) > MaxMessageIDLen {
		return fmt.Errorf("%w: message id is %d characters, the limit is %d", ErrInvalid, len(id), MaxMessageIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !idChar(id[i]) {
			return fmt.Errorf("%w: message id has character %q at position %d (allowed: A-Z a-z 0-9 _ - . and colon)", ErrInvalid, id[i], i)
		}
	}
	return nil
}

// ValidateConsumer reports whether name is usable as a consumer name:
// 1 to 64 characters of a-z 0-9 - . (no '/', which separates it from the
// message ID in a workflow ID).
func ValidateConsumer(name string) error {
	if name == "" {
		return fmt.Errorf("%w: consumer name is empty", ErrInvalid)
	}
	if len(name) > MaxConsumerLen {
		return fmt.Errorf("%w: consumer name is %d characters, the limit is %d", ErrInvalid, len(name), MaxConsumerLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("%w: consumer name has character %q at position %d (allowed: a-z 0-9 - and dot)", ErrInvalid, c, i)
		}
	}
	return nil
}

// ValidateNamespace reports whether ns is usable as a key namespace: empty
// (no namespace), or 1 to 64 characters of A-Z a-z 0-9 _ - . (no '/',
// which separates it from the key, and no ':', which separates a key's
// effect from its message ID).
func ValidateNamespace(ns string) error {
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: key namespace is %d characters, the limit is %d", ErrInvalid, len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !idChar(c) || c == ':' {
			return fmt.Errorf("%w: key namespace has character %q at position %d (allowed: A-Z a-z 0-9 _ - and dot)", ErrInvalid, c, i)
		}
	}
	return nil
}

func validateEffect(e Effect) error {
	if e == "" {
		return fmt.Errorf("%w: effect name is empty", ErrInvalid)
	}
	for i := 0; i < len(e); i++ {
		c := e[i]
		if !(c >= 'a' && c <= 'z') {
			return fmt.Errorf("%w: effect name has character %q at position %d; allowed are a-z", ErrInvalid, c, i)
		}
	}
	return nil
}

func idChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == ':'
}

// WorkflowID returns the Temporal workflow ID of the message messageID as
// handled by consumer: "<consumer>/<messageID>". Every copy of the message
// maps to the same ID, which is what lets Temporal's ID conflict and reuse
// policies reject the copy.
func WorkflowID(consumer, messageID string) (string, error) {
	if err := ValidateConsumer(consumer); err != nil {
		return "", err
	}
	if err := ValidateMessageID(messageID); err != nil {
		return "", err
	}
	return consumer + "/" + messageID, nil
}

// ParseWorkflowID is the inverse of WorkflowID.
func ParseWorkflowID(id string) (consumer, messageID string, err error) {
	for i := 0; i < len(id); i++ {
		if id[i] == '/' {
			consumer, messageID = id[:i], id[i+1:]
			if err := ValidateConsumer(consumer); err != nil {
				return "", "", err
			}
			if err := ValidateMessageID(messageID); err != nil {
				return "", "", err
			}
			return consumer, messageID, nil
		}
	}
	return "", "", fmt.Errorf("%w: workflow id %q has no '/'", ErrInvalid, id)
}

// Key returns the idempotency key of effect for the message messageID:
// "<effect>:<messageID>", e.g. "payment:evt_91c2". It is sent to providers
// that accept one (Stripe's Idempotency-Key) and keys the effect ledger for
// those that do not (SendGrid).
//
// Message IDs may be 255 characters long, but Stripe accepts keys of at most
// 255. When "<effect>:<messageID>" would be longer, the key is
// "<effect>:~<hex SHA-256 of messageID>". '~' never occurs in a message ID, so
// a hashed key can never equal a plain one.
func Key(effect Effect, messageID string) (string, error) {
	if err := validateEffect(effect); err != nil {
		return "", err
	}
	if err := ValidateMessageID(messageID); err != nil {
		return "", err
	}
	k := string(effect) + ":" + messageID
	if len(k) > MaxKeyLen {
		sum := sha256.Sum256([]byte(messageID))
		k = string(effect) + ":~" + hex.EncodeToString(sum[:])
	}
	if len(k) > MaxKeyLen {
		return "", fmt.Errorf("%w: effect name %q is too long for a %d-character key", ErrInvalid, effect, MaxKeyLen)
	}
	return k, nil
}

// Scope returns key as a provider sees it under the key namespace ns: key
// itself when ns is empty (so a deployment without a namespace keeps
// "payment:evt_91c2"), else "<ns>/<key>", e.g. "eu/payment:evt_91c2".
//
// key is a key Key returned, "<effect>:<message ID>" or its hashed form.
// When "<ns>/<key>" would be longer than MaxKeyLen, Scope applies Key's
// shortening rule to the scoped key: "<ns>/<effect>:~<hex SHA-256 of the
// message ID>". A scoped key is thus a function of the namespace, the
// effect and the message ID alone, never longer than MaxKeyLen (at most
// MaxNamespaceLen+1+len(effect)+2+64 once hashed), and injective: a
// namespace contains no '/', a key none either, and a message ID no '~'.
func Scope(ns, key string) (string, error) {
	if ns == "" {
		return key, nil
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	effect, rest, ok := strings.Cut(key, ":")
	if !ok || rest == "" || strings.Contains(key, NamespaceSeparator) {
		return "", fmt.Errorf("%w: %q is not an idempotency key", ErrInvalid, key)
	}
	if err := validateEffect(Effect(effect)); err != nil {
		return "", err
	}
	scoped := ns + NamespaceSeparator + key
	if len(scoped) <= MaxKeyLen {
		return scoped, nil
	}
	// Only an unhashed key gets here: a hashed one is at most
	// len(effect)+66 characters.
	if err := ValidateMessageID(rest); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(rest))
	scoped = ns + NamespaceSeparator + effect + ":~" + hex.EncodeToString(sum[:])
	if len(scoped) > MaxKeyLen {
		return "", fmt.Errorf("%w: effect name %q is too long for a %d-character key", ErrInvalid, effect, MaxKeyLen)
	}
	return scoped, nil
}

// MustKey is Key for inputs already validated; it panics on invalid input.
func MustKey(effect Effect, messageID string) string {
	k, err := Key(effect, messageID)
	if err != nil {
		panic(err)
	}
	return k
}
