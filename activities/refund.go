package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/failpoint"
	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/store"
)

// ErrTypePaymentPending is the type of the error RefundOrder returns while
// the order's payment has no final outcome, so that the refund cannot be
// decided yet. Retryable: the refund waits for the payment.
const ErrTypePaymentPending = "PaymentPending"

// RefundInput is what RefundOrder needs: everything comes from the message;
// the PaymentIntent and the currency come from the recorded payment.
type RefundInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Reason    string `json:"reason"`
}

// RefundOutcome is the outcome of RefundOrder.
type RefundOutcome string

// Refund outcomes returned by RefundOrder.
const (
	// RefundRefunded: Stripe created the refund (once, under the key).
	RefundRefunded RefundOutcome = "refunded"
	// RefundRefused: Stripe refused the refund; its amount is free again.
	RefundRefused RefundOutcome = "refund_failed"
	// RefundExceedsPayment: more than what remains of the payment; Stripe
	// was not called.
	RefundExceedsPayment RefundOutcome = "refund_exceeds_payment"
	// RefundOrderNotPaid: the order was never paid; Stripe was not called.
	RefundOrderNotPaid RefundOutcome = "order_not_paid"
)

// RefundResult is the recorded outcome of RefundOrder.
type RefundResult struct {
	Outcome         RefundOutcome `json:"outcome"`
	RefundID        string        `json:"refund_id,omitempty"`
	PaymentIntentID string        `json:"payment_intent_id,omitempty"`
	Currency        string        `json:"currency,omitempty"`
	// Paid and Refunded are the payment's amount and what its other
	// refunds already hold, for RefundExceedsPayment.
	Paid     int64 `json:"paid,omitempty"`
	Refunded int64 `json:"refunded,omitempty"`
	// FailureCode explains a RefundRefused.
	FailureCode string `json:"failure_code,omitempty"`
	Replayed    bool   `json:"replayed,omitempty"`
	Recorded    bool   `json:"recorded,omitempty"`
	Reconciled  bool   `json:"reconciled,omitempty"`
}

// RefundOrder refunds part of an order's payment exactly once.
//
// Safe to retry: the refund is decided in Postgres first, in one
// transaction that locks the payment (a refund beyond what remains, or of an
// order never paid, is recorded as such and Stripe is not called); Stripe is
// called with the key "refund:<message id>" against the recorded
// PaymentIntent (a repeat is replayed, never refunded again); the outcome
// commits with the message's processed row in one statement. An ambiguous
// answer is settled by listing the PaymentIntent's refunds, which is
// strongly consistent.
func (a *Activities) RefundOrder(ctx context.Context, in RefundInput) (RefundResult, error) {
	// Like a charge: a worker stop lets the claim, the refund and its record
	// finish, and a regular attempt heartbeats (refundOptions set a
	// HeartbeatTimeout).
	ctx, end, err := a.beginEffect(ctx)
	if err != nil {
		return RefundResult{}, err
	}
	defer end()
	key, err := identity.Key(identity.EffectRefund, in.MessageID)
	if err != nil {
		return RefundResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}
	logger := activity.GetLogger(ctx)
	claim, err := a.Store.ClaimRefund(ctx, store.RefundClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount,
		Reason: in.Reason, Key: key, RequestHash: requestHash(in),
	})
	if err != nil {
		return RefundResult{}, fenced(fmt.Errorf("claim refund of order %d: %w", in.OrderID, err))
	}
	switch claim.Decision {
	case store.RefundOrderNotPaid:
		logger.Info("refund refused: order not paid", "order_id", in.OrderID, "payment_state", claim.PaymentState)
		return RefundResult{Outcome: RefundOrderNotPaid}, nil
	case store.RefundExceedsPayment:
		logger.Info("refund refused: exceeds what remains of the payment", "order_id", in.OrderID,
			"amount", in.Amount, "paid", claim.Paid, "refunded", claim.Refunded)
		return RefundResult{Outcome: RefundExceedsPayment, Paid: claim.Paid, Refunded: claim.Refunded}, nil
	case store.RefundPaymentPending:
		return RefundResult{}, temporal.NewApplicationError(
			fmt.Sprintf("payment of order %d is %s: the refund waits for its outcome", in.OrderID, claim.PaymentState), ErrTypePaymentPending)
	case store.RefundDone:
		return recordedRefund(claim.Refund)
	case store.RefundOwned:
	}
	r := claim.Refund
	req := payment.RefundRequest{
		IdempotencyKey: key, MessageID: in.MessageID, OrderID: in.OrderID,
		PaymentIntentID: r.PaymentIntentID, Amount: in.Amount, Reason: in.Reason,
	}
	rf, err := a.Payments.Refund(ctx, req)
	if err == nil {
		failpoint.Hit(failpoint.RefundAfterRefund)
		return a.recordRefund(ctx, in, key, claim.Claim, r, rf, false)
	}
	var pe *payment.Error
	if errors.As(err, &pe) && (pe.HTTPStatus == http.StatusUnauthorized || pe.HTTPStatus == http.StatusForbidden) {
		return RefundResult{}, fmt.Errorf("refund order %d: stripe refused the API key (fix STRIPE_API_KEY): %w", in.OrderID, err)
	}
	switch payment.Classify(err) {
	case payment.ClassDeclined, payment.ClassInvalid:
		code := ""
		if pe != nil {
			code = pe.Code
		}
		return a.recordRefundRefused(ctx, in, key, claim.Claim, r, code, err.Error())
	case payment.ClassIdempotencyMismatch:
		return RefundResult{}, temporal.NewNonRetryableApplicationError("stripe refused the key: same key, different parameters", ErrTypeIdempotencyMismatch, err)
	case payment.ClassAmbiguous:
		found, ferr := a.Payments.FindRefund(ctx, r.PaymentIntentID, in.MessageID)
		switch {
		case ferr == nil:
			logger.Warn("ambiguous stripe answer reconciled by listing refunds", "order_id", in.OrderID, "refund_id", found.ID)
			return a.recordRefund(ctx, in, key, claim.Claim, r, found, true)
		case errors.Is(ferr, payment.ErrNotFound):
			// The list is strongly consistent: no refund exists, and the key
			// only replays the error. The amount is freed for another message.
			return a.recordRefundRefused(ctx, in, key, claim.Claim, r, "ambiguous_not_created", err.Error())
		default:
			return RefundResult{}, fmt.Errorf("look up refund of order %d after ambiguous answer: %w", in.OrderID, ferr)
		}
	case payment.ClassInFlight, payment.ClassRateLimited, payment.ClassTransient:
	}
	// In flight (409), rate limited (429), transport errors, 5xx: retry
	// with backoff under the same key.
	return RefundResult{}, fmt.Errorf("refund order %d: %w", in.OrderID, err)
}

// recordedRefund returns the outcome already in Postgres, without a call.
func recordedRefund(r store.Refund) (RefundResult, error) {
	res := RefundResult{RefundID: r.RefundID, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency, Recorded: true}
	switch r.State {
	case store.RefundSucceeded:
		res.Outcome = RefundRefunded
	case store.RefundFailed:
		res.Outcome, res.FailureCode = RefundRefused, r.FailureCode
	case store.RefundClaimed:
		// ClaimRefund reports a claimed refund as done only when its ledger
		// row is terminal without the refund row following: a bug.
		return RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund of order %d is claimed but its ledger row is settled", r.OrderID), ErrTypeInvalidInput, nil)
	}
	return res, nil
}

func (a *Activities) recordRefund(ctx context.Context, in RefundInput, key string, token int32, r store.Refund, rf *payment.Refund, reconciled bool) (RefundResult, error) {
	if rf.Failed() {
		return a.recordRefundRefused(ctx, in, key, token, r, "refund_"+rf.Status, "stripe reports the refund "+rf.Status)
	}
	_, err := a.Store.RecordRefundSucceeded(ctx, store.RefundSuccess{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token,
		RefundID: rf.ID, Status: rf.Status,
	})
	if err != nil {
		// The refund exists at Stripe; a retry replays it under the key and
		// records it then.
		return RefundResult{}, fenced(fmt.Errorf("record refund of order %d: %w", in.OrderID, err))
	}
	return RefundResult{
		Outcome: RefundRefunded, RefundID: rf.ID, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency,
		Replayed: rf.Replayed, Reconciled: reconciled,
	}, nil
}

func (a *Activities) recordRefundRefused(ctx context.Context, in RefundInput, key string, token int32, r store.Refund, code, msg string) (RefundResult, error) {
	if _, err := a.Store.RecordRefundFailed(ctx, store.RefundFailure{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token, Code: code, Message: msg,
	}); err != nil {
		return RefundResult{}, fenced(fmt.Errorf("record refused refund of order %d: %w", in.OrderID, err))
	}
	activity.GetLogger(ctx).Warn("refund refused by stripe", "order_id", in.OrderID, "code", code)
	return RefundResult{Outcome: RefundRefused, FailureCode: code, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency}, nil
}

// RefundReceiptInput is what SendRefundReceipt needs. The address is not in
// it: the activity reads it from Postgres, so no customer data travels
// through Temporal for a refund.
type RefundReceiptInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	RefundID  string `json:"refund_id"`
}

// SendRefundReceipt tells the customer about a refund, under the ledger key
// "email:<message id>" and the worker's email policy, like SendReceipt. The
// address is the one the order's receipt went to; when it is no longer
// kept (the order's message was pruned), the receipt is recorded as failed.
func (a *Activities) SendRefundReceipt(ctx context.Context, in RefundReceiptInput) (ReceiptResult, error) {
	ctx, end, err := a.beginEffect(ctx)
	if err != nil {
		return ReceiptResult{}, err
	}
	defer end()
	key, err := identity.Key(identity.EffectEmail, in.MessageID)
	if err != nil {
		return ReceiptResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}
	to, err := a.Store.ReceiptAddress(ctx, in.OrderID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ReceiptResult{}, fmt.Errorf("refund receipt of order %d: %w", in.OrderID, err)
	}
	mail := refundMail(key, to, in)
	// OrderID 0: a refund receipt leaves the order's receipt_status alone.
	decision, e, err := a.Store.ClaimEmail(ctx, store.EmailClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, Key: key,
		RequestHash: requestHash(mail), Policy: a.emailPolicy(),
	})
	if err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("claim refund receipt of order %d: %w", in.OrderID, err))
	}
	switch decision {
	case store.EmailDone:
		return recordedReceipt(e), nil
	case store.EmailUnknown:
		activity.GetLogger(ctx).Warn("refund receipt not resent: an earlier attempt may have sent it", "order_id", in.OrderID, "policy", a.emailPolicy())
		return ReceiptResult{Outcome: ReceiptUnknown, Error: e.Error}, nil
	case store.EmailSend:
	}
	if to == "" {
		const reason = "no address on record: the order's message was pruned"
		if _, err := a.Store.RecordEmailFailed(ctx, key, e.Claim, 0, reason); err != nil {
			return ReceiptResult{}, fenced(fmt.Errorf("record unsendable refund receipt of order %d: %w", in.OrderID, err))
		}
		return ReceiptResult{Outcome: ReceiptFailed, Error: reason}, nil
	}
	id, err := a.Mailer.Send(ctx, mail)
	if err != nil {
		if email.IsPermanent(err) {
			if _, rerr := a.Store.RecordEmailFailed(ctx, key, e.Claim, 0, err.Error()); rerr != nil {
				return ReceiptResult{}, fenced(fmt.Errorf("record refused refund receipt of order %d: %w", in.OrderID, rerr))
			}
			return ReceiptResult{Outcome: ReceiptFailed, Error: err.Error()}, nil
		}
		return ReceiptResult{}, fmt.Errorf("send refund receipt of order %d: %w", in.OrderID, err)
	}
	if _, err := a.Store.RecordEmailSent(ctx, key, e.Claim, 0, id); err != nil {
		return ReceiptResult{}, fenced(fmt.Errorf("record refund receipt of order %d (sendgrid id %s): %w", in.OrderID, id, err))
	}
	return ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: id}, nil
}

// recordedReceipt is a settled email ledger row as a ReceiptResult.
func recordedReceipt(e store.Effect) ReceiptResult {
	r := ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: e.ProviderRef, Recorded: true}
	switch e.State {
	case store.StateFailed:
		r.Outcome, r.Error = ReceiptFailed, e.Error
	case store.StateUnknown:
		r.Outcome, r.Error = ReceiptUnknown, e.Error
	default: // succeeded: only terminal rows are done
	}
	return r
}

// refundMail builds the refund receipt from the input and the address
// alone, so its hash fingerprints the request in the ledger.
func refundMail(key, to string, in RefundReceiptInput) email.Mail {
	return email.Mail{
		IdempotencyKey: key,
		MessageID:      in.MessageID,
		To:             to,
		Subject:        fmt.Sprintf("Your refund for order %d", in.OrderID),
		Text: fmt.Sprintf("We refunded %s of your order %d (refund %s). It reaches your account within a few days.\n",
			formatAmount(in.Amount, in.Currency), in.OrderID, in.RefundID),
	}
}
