package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// ReceiptInput is what SendReceipt needs, all from the message and the
// recorded payment.
type ReceiptInput struct {
	Consumer        string `json:"consumer"`
	MessageID       string `json:"message_id"`
	OrderID         int64  `json:"order_id"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	To              string `json:"to"`
	PaymentIntentID string `json:"payment_intent_id"`
	// Sent is the outcome ChargeOrder's attempt recorded for this receipt
	// (ChargeResult.Receipt): SendReceipt returns it as it is, with no
	// send and no transaction. Not part of the mail.
	Sent *ReceiptResult `json:"sent,omitempty"`
}

// ReceiptOutcome is the outcome of SendReceipt.
type ReceiptOutcome string

// Receipt outcomes returned by SendReceipt.
const (
	ReceiptSent    ReceiptOutcome = "sent"
	ReceiptFailed  ReceiptOutcome = "failed"
	ReceiptUnknown ReceiptOutcome = "unknown"
)

// ReceiptResult is the recorded outcome of SendReceipt.
type ReceiptResult struct {
	// Outcome is ReceiptSent, ReceiptFailed (SendGrid refused it for good)
	// or ReceiptUnknown (at-most-once found an earlier send in flight).
	Outcome ReceiptOutcome `json:"outcome"`
	// ProviderMessageID is SendGrid's X-Message-Id.
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	Error             string `json:"error,omitempty"`
	// Recorded is true when the ledger already had the outcome (no send).
	Recorded bool `json:"recorded,omitempty"`
}

// SendReceiptName is SendReceipt's activity type name.
const SendReceiptName = "SendReceipt"

func init() { register(SendReceiptName, func(a *Activities) any { return a.SendReceipt }) }

// SendReceipt sends the receipt of one paid order, under the effect
// protocol (internal/effect) with the ledger key "email:<message id>".
//
// The ledger row is consulted first: a recorded send is never repeated.
// Under the default at-least-once policy the send comes before its record,
// so a crash between SendGrid's 202 and the record's commit may send the
// receipt again on retry (at most once more per such crash). SendGrid keeps
// no idempotency key, so a retry (a claim after another) looks the mail up
// first: the key travels in custom_args and SendGrid's Event Webhook names
// it, so with ResendGrace set the retry waits that long for SendGrid's event
// and resends only when none arrives (see awaitEarlierSend). A 401, 403 or
// 404 (our key or base URL) is retried and alerts, never recorded.
//
// A receipt the charge already sent and recorded (in.Sent) is returned as
// it is: the workflow still schedules SendReceipt, so that its histories
// keep the shape older workers replay.
func (a *Activities) SendReceipt(ctx context.Context, in ReceiptInput) (ReceiptResult, error) {
	if in.Sent != nil {
		return *in.Sent, nil
	}
	count := func(r ReceiptResult, err error) { a.countReceipt(metrics.EffectReceipt, r, err) }
	return attempt(ctx, a, identity.EffectEmail, in.Consumer, in.MessageID, count, func(ctx context.Context, key string) (ReceiptResult, error) {
		m := &mailing{a: a, kind: metrics.EffectReceipt, what: fmt.Sprintf("receipt of order %d", in.OrderID), orderID: in.OrderID, statusOrder: in.OrderID}
		alt, err := identity.Key(identity.EffectOrderEmail, in.MessageID)
		if err != nil {
			return ReceiptResult{}, err
		}
		return m.send(ctx, store.EmailClaim{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, AltKey: alt},
			func(key string) email.Mail { return receiptMail(key, in) }, "")
	})
}

// mailing is one claim's attempt at a receipt (an order's or a refund's):
// the mail kind of the effect protocol.
type mailing struct {
	a    *Activities
	kind metrics.Effect
	what string // "receipt of order 42", for errors and logs
	// orderID names the order in logs; statusOrder is the order whose
	// receipt_status follows the mail (0 for a refund receipt).
	orderID, statusOrder int64
	key                  string // the claimed ledger row's key
	token                int32
	mail                 email.Mail
}

// send claims c (its Key, and c.LegacyKey or c.AltKey when set, built
// into mails by build) and runs the protocol: a recorded outcome is returned without a
// send; an unsendable reason is recorded as failed without a send.
func (m *mailing) send(ctx context.Context, c store.EmailClaim, build func(key string) email.Mail, unsendable string) (ReceiptResult, error) {
	a := m.a
	c.Policy = a.emailPolicy()
	c.RequestHash = requestHash(build(c.Key))
	if c.LegacyKey != "" {
		c.LegacyRequestHash = requestHash(build(c.LegacyKey))
	}
	if c.AltKey != "" {
		c.AltRequestHash = requestHash(build(c.AltKey))
	}
	decision, e, err := a.Store.ClaimEmail(ctx, c)
	if err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("claim %s: %w", m.what, err))
	}
	switch decision {
	case store.EmailDone:
		return recordedReceipt(e), nil
	case store.EmailUnknown:
		logger(ctx).Warn("mail not resent: an earlier attempt may have sent it", "order_id", m.orderID, "key", e.Key, "policy", c.Policy)
		return ReceiptResult{Outcome: ReceiptUnknown, Error: e.Error}, nil
	case store.EmailSend:
	}
	m.key, m.token, m.mail = e.Key, e.Claim, build(e.Key)
	if unsendable != "" {
		return m.Refused(ctx, errors.New(unsendable))
	}
	out, err := effect.Run(ctx, effect.Attempt{Claim: e.Claim, ClaimedAt: e.CreatedAt, Unsent: e.Unsent()}, a.now(), effect.Kind[string, ReceiptResult](m))
	return out, a.boundary(ctx, m.kind, "send "+m.what, err)
}

// Call sends the mail; SendGrid answers its X-Message-Id.
func (m *mailing) Call(ctx context.Context) (string, error) {
	id, err := m.a.Mailer.Send(ctx, m.mail)
	if err == nil {
		failpoint.Hit(failpoint.EmailAfterSend)
	}
	return id, err
}

// Release gives the claim back when the mail was not sent (effect.Releaser).
func (m *mailing) Release(ctx context.Context) error {
	return m.a.Store.ReleaseEffect(ctx, m.key, m.token)
}

// Lookup is the event table plus the grace: SendGrid's event for the key
// proves an earlier attempt's send (see awaitEarlierSend). Under
// at-most-once no claim gets here after a send (its in_flight row is
// settled unknown by the claim), so nothing is looked up.
func (m *mailing) Lookup(ctx context.Context) (string, error) {
	if m.a.emailPolicy() != store.AtLeastOnce {
		return "", effect.ErrNotFound
	}
	x, ok, err := m.a.awaitEarlierSend(ctx, m.key, m.orderID)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "", effect.ErrNotFound
	}
	return x, nil
}

// Differs: an event names the key, and the webhook keeps only our key
// namespace's, so what it proves is this mail.
func (m *mailing) Differs(string) string { return "" }

// Classify classifies a failed send (mailClass).
func (m *mailing) Classify(err error) effect.Class { return mailClass(err) }

// Record records SendGrid's acceptance.
func (m *mailing) Record(ctx context.Context, x string, via effect.Via) (ReceiptResult, error) {
	if _, err := m.a.Store.RecordEmailSent(ctx, m.key, m.token, m.statusOrder, x); err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("record %s (sendgrid id %s): %w", m.what, x, err))
	}
	if via == effect.ViaLookup {
		logger(ctx).Info("mail not resent: sendgrid reported the earlier send", "order_id", m.orderID, "key", m.key, "x_message_id", x)
	}
	return ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: x}, nil
}

// Refused records a mail SendGrid refused for good (or one that cannot be
// sent at all).
func (m *mailing) Refused(ctx context.Context, cause error) (ReceiptResult, error) {
	if _, err := m.a.Store.RecordEmailFailed(ctx, m.key, m.token, m.statusOrder, cause.Error()); err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("record refused %s: %w", m.what, err))
	}
	logger(ctx).Warn("mail refused", "order_id", m.orderID, "key", m.key, "error", cause)
	return ReceiptResult{Outcome: ReceiptFailed, Error: cause.Error()}, nil
}

// Foreign cannot happen for a mail (Differs never differs).
func (m *mailing) Foreign(_ context.Context, _ string, reason string) (ReceiptResult, error) {
	return ReceiptResult{}, fmt.Errorf("%s: %s", m.what, reason)
}

// Unfound cannot happen for a mail: no send failure is ambiguous to
// mailClass (a transient one is retried, and the retry looks up).
func (m *mailing) Unfound(_ context.Context, cause error) (ReceiptResult, error) {
	return ReceiptResult{}, fmt.Errorf("send %s: %w", m.what, cause)
}

// receiptMail builds the receipt from the input alone: the same input always
// gives the same mail, so its hash fingerprints the request in the ledger.
func receiptMail(key string, in ReceiptInput) email.Mail {
	amount := formatAmount(in.Amount, in.Currency)
	text := fmt.Sprintf("Thank you for your order %d.\n\nWe charged %s (payment %s).\n", in.OrderID, amount, in.PaymentIntentID)
	return email.Mail{
		IdempotencyKey: key,
		MessageID:      in.MessageID,
		To:             in.To,
		Subject:        fmt.Sprintf("Your receipt for order %d", in.OrderID),
		Text:           text,
	}
}

// zeroDecimal lists currencies without minor units (Stripe's list).
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
	"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
}

func formatAmount(minor int64, currency string) string {
	cur := strings.ToUpper(currency)
	if zeroDecimal[currency] {
		return fmt.Sprintf("%d %s", minor, cur)
	}
	return fmt.Sprintf("%d.%02d %s", minor/100, minor%100, cur)
}
