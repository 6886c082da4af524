package payment

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/internal/leaf/deadline"
)

// RefundRequest describes one refund of a PaymentIntent.
type RefundRequest struct {
	// IdempotencyKey is sent as the Idempotency-Key header ("refund:<message
	// id>"). Required; the same key for every attempt at the same refund.
	IdempotencyKey string
	// MessageID is stored as metadata[message_id]; FindRefund matches on it.
	// Required.
	MessageID string
	// OrderID is stored as metadata[order_id] unless it is zero.
	OrderID int64
	// PaymentIntentID is the PaymentIntent to refund, pi_... Required.
	PaymentIntentID string
	// Amount is in the currency's smallest unit; the currency is the
	// PaymentIntent's.
	Amount int64
	// Reason is Stripe's reason: duplicate, fraudulent or
	// requested_by_customer.
	Reason string
}

func (r RefundRequest) validate() error {
	if err := (ChargeRequest{IdempotencyKey: r.IdempotencyKey, MessageID: r.MessageID}).validate(); err != nil {
		return err
	}
	if r.PaymentIntentID == "" {
		return localError("PaymentIntentID is required")
	}
	return nil
}

// Refund is a Stripe Refund.
type Refund struct {
	// ID is the Refund's ID, re_...
	ID string
	// Status is the Refund's status: succeeded, pending, requires_action,
	// failed or canceled.
	Status string
	// Amount and Currency are what was refunded.
	Amount   int64
	Currency string
	// PaymentIntentID is the refunded PaymentIntent.
	PaymentIntentID string
	// MessageID is the Refund's metadata[message_id].
	MessageID string
	// FailureReason is Stripe's failure_reason of a failed refund.
	FailureReason string
	// Replayed reports that Stripe answered from its idempotency layer.
	Replayed bool
}

// Failed reports whether the refund did not and will not move money back.
func (r *Refund) Failed() bool {
	return r.Status == string(stripe.RefundStatusFailed) || r.Status == string(stripe.RefundStatusCanceled)
}

// Pending reports whether Stripe has not moved the money yet: the refund
// is pending, or requires_action (the customer must act first).
func (r *Refund) Pending() bool {
	return r.Status == string(stripe.RefundStatusPending) || r.Status == string(stripe.RefundStatusRequiresAction)
}

// RetrieveRefund reads a Refund by its ID: strongly consistent, like any
// read of one object, so its status is the one Stripe holds now. A refund
// of another key namespace is refused as not found.
func (c *Client) RetrieveRefund(ctx context.Context, id string) (*Refund, error) {
	if !strings.HasPrefix(id, "re_") {
		return nil, fmt.Errorf("payment: retrieve refund: %w", localError("a refund ID (re_...) is required"))
	}
	params := &stripe.RefundParams{}
	params.Context = ctx
	r, err := c.api.Refunds.Get(id, params)
	if err != nil {
		return nil, fmt.Errorf("payment: retrieve refund %s: %w", id, c.newError(err))
	}
	if !c.ours(r.Metadata) {
		return nil, fmt.Errorf("payment: refund %s is of another key namespace: %w", id, ErrNotFound)
	}
	return toRefund(r), nil
}

// Refund creates a Stripe Refund of req.PaymentIntentID under
// req.IdempotencyKey, scoped by the Client's key namespace. Stripe answers a repeat of the key with the first
// answer (Replayed), so a retried refund never refunds twice. Errors wrap an
// *Error, classified like Charge's: a refusal (the amount is more than
// what remains, the charge was disputed) is ClassInvalid.
func (c *Client) Refund(ctx context.Context, req RefundRequest) (*Refund, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("payment: refund: %w", err)
	}
	key, err := c.scope(req.IdempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("payment: refund: %w", err)
	}
	if err := c.late(ctx, "refund"); err != nil {
		return nil, fmt.Errorf("payment: refund message %s: %w", req.MessageID, err)
	}
	params := refundParams(req, c.namespace)
	params.SetIdempotencyKey(key)
	// A resend stripe-go makes is never taken as unsent (deadline.Refusal).
	params.Context = deadline.TrackSends(ctx)
	r, err := c.api.Refunds.New(params)
	if err != nil {
		return nil, fmt.Errorf("payment: refund message %s: %w", req.MessageID, c.newError(err))
	}
	return toRefund(r), nil
}

// refundParams builds the Refund parameters for req under the key
// namespace ns, without the idempotency key (Refund sets the scoped one).
// They depend on req and ns alone, so every attempt sends the same request.
func refundParams(req RefundRequest, ns string) *stripe.RefundParams {
	params := &stripe.RefundParams{
		PaymentIntent: stripe.String(req.PaymentIntentID),
		Amount:        stripe.Int64(req.Amount),
	}
	if req.Reason != "" {
		params.Reason = stripe.String(req.Reason)
	}
	params.AddMetadata("message_id", req.MessageID)
	if req.OrderID != 0 {
		params.AddMetadata("order_id", strconv.FormatInt(req.OrderID, 10))
	}
	if ns != "" {
		params.AddMetadata(MetadataNamespace, ns)
	}
	return params
}

// refundsPage is how many refunds one list request asks for (Stripe's
// most); maxListedRefunds bounds how many of one PaymentIntent FindRefund
// examines, over as many pages.
const (
	refundsPage      = 100
	maxListedRefunds = 10000
)

// FindRefund looks for the refund a message made of a PaymentIntent, by
// listing the PaymentIntent's refunds, every page of them: unlike search,
// the list API is strongly consistent, so "not found" right after an
// ambiguous answer means no refund was created. Only a refund of the
// Client's key namespace counts. It returns an error wrapping ErrNotFound
// when there is none, and another error (never a silent not found) when
// the PaymentIntent has more than maxListedRefunds refunds.
func (c *Client) FindRefund(ctx context.Context, paymentIntentID, messageID string) (*Refund, error) {
	if paymentIntentID == "" || messageID == "" {
		return nil, fmt.Errorf("payment: find refund: %w", localError("payment intent ID and message ID are required"))
	}
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(paymentIntentID)}
	params.Context = ctx
	params.Limit = stripe.Int64(refundsPage)
	it := c.api.Refunds.List(params)
	for n := 1; it.Next(); n++ {
		if n > maxListedRefunds {
			return nil, fmt.Errorf("payment: find refund of message %s: %s has more than %d refunds, more than one lookup examines; an operator must look for it in the dashboard",
				messageID, paymentIntentID, maxListedRefunds)
		}
		if r := it.Refund(); r.Metadata["message_id"] == messageID && c.ours(r.Metadata) {
			return toRefund(r), nil
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("payment: find refund of message %s: %w", messageID, c.newError(err))
	}
	return nil, fmt.Errorf("payment: no refund of %s for message %s: %w", paymentIntentID, messageID, ErrNotFound)
}

func toRefund(r *stripe.Refund) *Refund {
	out := &Refund{
		ID: r.ID, Status: string(r.Status), Amount: r.Amount, Currency: string(r.Currency),
		MessageID: r.Metadata["message_id"], FailureReason: string(r.FailureReason),
	}
	if r.PaymentIntent != nil {
		out.PaymentIntentID = r.PaymentIntent.ID
	}
	if r.LastResponse != nil {
		out.Replayed = r.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return out
}

// Differs describes how a refund found by FindRefund differs from req, of
// a payment in currency: "" when it is req's refund (same PaymentIntent,
// amount and currency), else the difference. FindRefund has checked the
// message ID and the key namespace already.
func (r *Refund) Differs(req RefundRequest, currency string) string {
	var diffs []string
	if r.PaymentIntentID != req.PaymentIntentID {
		diffs = append(diffs, fmt.Sprintf("payment intent %s, want %s", r.PaymentIntentID, req.PaymentIntentID))
	}
	if r.Amount != req.Amount {
		diffs = append(diffs, fmt.Sprintf("amount %d, want %d", r.Amount, req.Amount))
	}
	if !strings.EqualFold(r.Currency, currency) {
		diffs = append(diffs, fmt.Sprintf("currency %q, want %q", r.Currency, strings.ToLower(currency)))
	}
	return strings.Join(diffs, "; ")
}
