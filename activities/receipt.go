package activities

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/failpoint"
	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/store"
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

// SendReceipt sends the receipt of one paid order.
//
// The ledger row "email:<message id>" is consulted first: a recorded send is
// never repeated. Under the default at-least-once policy the send comes
// before its record, so a crash between SendGrid's 202 and the record's
// commit sends the receipt again on retry (at most once more per such crash).
// The key travels in custom_args, so the duplicate can be recognised in
// SendGrid's event webhook.
func (a *Activities) SendReceipt(ctx context.Context, in ReceiptInput) (res ReceiptResult, err error) {
	ctx, end, err := a.beginEffect(ctx)
	if err != nil {
		return ReceiptResult{}, err
	}
	defer func() {
		end()
		a.countReceipt(res, err)
	}()
	key, err := identity.Key(identity.EffectEmail, in.MessageID)
	if err != nil {
		return ReceiptResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}
	mail := receiptMail(key, in)
	decision, e, err := a.Store.ClaimEmail(ctx, store.EmailClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key,
		RequestHash: requestHash(mail), Policy: a.emailPolicy(),
	})
	if err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("claim receipt of order %d: %w", in.OrderID, err))
	}
	switch decision {
	case store.EmailDone:
		r := ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: e.ProviderRef, Recorded: true}
		switch e.State {
		case store.StateFailed:
			r.Outcome, r.Error = ReceiptFailed, e.Error
		case store.StateUnknown:
			r.Outcome, r.Error = ReceiptUnknown, e.Error
		}
		return r, nil
	case store.EmailUnknown:
		activity.GetLogger(ctx).Warn("receipt not resent: an earlier attempt may have sent it", "order_id", in.OrderID, "policy", a.emailPolicy())
		return ReceiptResult{Outcome: ReceiptUnknown, Error: e.Error}, nil
	}
	token := e.Claim

	id, err := a.Mailer.Send(ctx, mail)
	if err != nil {
		if email.IsPermanent(err) {
			if _, rerr := a.Store.RecordEmailFailed(ctx, key, token, in.OrderID, err.Error()); rerr != nil {
				return ReceiptResult{}, fenced(fmt.Errorf("record refused receipt of order %d: %w", in.OrderID, rerr))
			}
			activity.GetLogger(ctx).Warn("receipt refused by sendgrid", "order_id", in.OrderID, "error", err)
			return ReceiptResult{Outcome: ReceiptFailed, Error: err.Error()}, nil
		}
		return ReceiptResult{}, fmt.Errorf("send receipt of order %d: %w", in.OrderID, err)
	}
	failpoint.Hit(failpoint.EmailAfterSend)
	if _, err := a.Store.RecordEmailSent(ctx, key, token, in.OrderID, id); err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("record receipt of order %d (sendgrid id %s): %w", in.OrderID, id, err))
	}
	return ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: id}, nil
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
