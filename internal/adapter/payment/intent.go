package payment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/effectively/effectively/internal/leaf/deadline"
)

// Create, then confirm. Create makes the PaymentIntent without confirming
// it (nothing can be charged yet), under a key that replays the same
// PaymentIntent for 24 hours; Confirm then charges it, under a key of its
// own. An ambiguous confirmation is settled by Get on the PaymentIntent's
// ID, which is strongly consistent, instead of by Search, which Stripe
// documents as eventually consistent (normally a minute behind, up to an
// hour during incidents). A PaymentIntent succeeds at most once, whatever
// the key of a confirm, so no retry that reaches the same PaymentIntent can
// charge twice. When the create itself was ambiguous, or its key has
// expired before the caller recorded the ID, FindInWindow looks over the
// claim's time window: a list (strongly consistent) of what is younger
// than SearchLag, Search only for what is older than that.

// Create creates req's PaymentIntent without confirming it, under
// req.IdempotencyKey (the create key: every attempt returns the same
// PaymentIntent for 24 hours), scoped by the Client's key namespace. The
// parameters depend on req and the namespace alone.
func (c *Client) Create(ctx context.Context, req ChargeRequest) (*Charge, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("payment: create: %w", err)
	}
	key, err := c.scope(req.IdempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("payment: create: %w", err)
	}
	if err := c.late(ctx, "create"); err != nil {
		return nil, fmt.Errorf("payment: create for message %s: %w", req.MessageID, err)
	}
	params := &stripe.PaymentIntentParams{
		Amount:             stripe.Int64(req.Amount),
		Currency:           stripe.String(strings.ToLower(req.Currency)),
		PaymentMethod:      stripe.String(req.PaymentMethod),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
	}
	addRequestMetadata(params, req, c.namespace)
	if req.CustomerRef != "" {
		params.Description = stripe.String(req.CustomerRef)
	}
	params.SetIdempotencyKey(key)
	// A resend stripe-go makes is never taken as unsent (deadline.Refusal).
	params.Context = deadline.TrackSends(ctx)
	pi, err := c.api.PaymentIntents.New(params)
	if err != nil {
		return nil, fmt.Errorf("payment: create for message %s: %w", req.MessageID, c.newError(err))
	}
	return toCharge(pi), nil
}

// Confirm confirms PaymentIntent paymentIntentID off-session under
// idempotencyKey (the confirm key), scoped by the Client's key namespace.
// A decline is an error of class
// ClassDeclined; any other answer is the PaymentIntent, whatever its Status
// (see Verdict).
func (c *Client) Confirm(ctx context.Context, paymentIntentID, idempotencyKey string) (*Charge, error) {
	switch {
	case paymentIntentID == "":
		return nil, fmt.Errorf("payment: confirm: %w", localError("payment intent ID is required"))
	case idempotencyKey == "" || strings.TrimSpace(idempotencyKey) != idempotencyKey || len(idempotencyKey) > MaxIdempotencyKeyLen:
		return nil, fmt.Errorf("payment: confirm: %w", localError("a valid idempotency key is required"))
	}
	key, err := c.scope(idempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("payment: confirm: %w", err)
	}
	if err := c.late(ctx, "confirm "+paymentIntentID); err != nil {
		return nil, fmt.Errorf("payment: confirm %s: %w", paymentIntentID, err)
	}
	params := &stripe.PaymentIntentConfirmParams{OffSession: stripe.Bool(true)}
	params.SetIdempotencyKey(key)
	// A resend stripe-go makes is never taken as unsent (deadline.Refusal).
	params.Context = deadline.TrackSends(ctx)
	pi, err := c.api.PaymentIntents.Confirm(paymentIntentID, params)
	if err != nil {
		return nil, fmt.Errorf("payment: confirm %s: %w", paymentIntentID, c.newError(err))
	}
	return toCharge(pi), nil
}

// MaxListed bounds how many PaymentIntents one list examines: a window
// that holds more is an error, never a silent "not found".
const MaxListed = 10000

// SearchLag is how far behind Stripe's Search may be: Stripe documents it
// as normally a minute, up to an hour during incidents. A PaymentIntent
// older than this is found by Search; a younger one only by a list.
const SearchLag = time.Hour

// searchLagMargin widens the part of a window that is listed rather than
// searched: clocks differ, and the lookup itself takes time.
const searchLagMargin = 10 * time.Minute

// FindInWindow returns the PaymentIntent created between from and to
// (inclusive, to the second) whose metadata[message_id] is messageID and
// whose key namespace is the Client's (see Config.Namespace): a succeeded
// one, else a processing one, else the newest. Another deployment's
// PaymentIntent for the same message ID is skipped. It returns an error
// wrapping ErrNotFound when there is none.
//
// A window no longer than SearchLag (plus a margin) is listed, which is
// strongly consistent. A longer one, which in a busy account may hold
// more than MaxListed PaymentIntents, is split: a list of the window's last
// SearchLag finds what Search may not see yet, and, unless that found a
// succeeded one, Search on metadata['message_id'] finds what is older. Neither
// part grows with the claim's age, so a retry never fails for good on
// "window too large"; only an account creating more than MaxListed
// PaymentIntents within SearchLag fails that list, for as long as the rate
// lasts.
func (c *Client) FindInWindow(ctx context.Context, messageID string, from, to time.Time) (*Charge, error) {
	if messageID == "" {
		return nil, fmt.Errorf("payment: find: %w", localError("message ID is required"))
	}
	if to.Sub(from) <= SearchLag+searchLagMargin {
		return c.listWindow(ctx, messageID, from, to)
	}
	// The last SearchLag first: what a retry just created is there, and a
	// succeeded one there makes the search needless.
	listed, err := c.listWindow(ctx, messageID, to.Add(-SearchLag-searchLagMargin), to)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if listed != nil && listed.Succeeded() {
		return listed, nil
	}
	searched, err := c.FindByMessageID(ctx, messageID)
	switch {
	case errors.Is(err, ErrNotFound) && listed != nil:
		return listed, nil
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("payment: no payment intent for message %s between %s and %s: %w",
			messageID, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), ErrNotFound)
	case err != nil:
		return nil, err
	case listed != nil && statusRank(stripe.PaymentIntentStatus(listed.Status)) > statusRank(stripe.PaymentIntentStatus(searched.Status)):
		return listed, nil
	}
	return searched, nil
}

// listWindow lists the PaymentIntents created between from and to and
// returns the best of the message's (see FindInWindow).
func (c *Client) listWindow(ctx context.Context, messageID string, from, to time.Time) (*Charge, error) {
	params := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: from.Unix(), LesserThanOrEqual: to.Unix(),
	}}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	var best *stripe.PaymentIntent
	it := c.api.PaymentIntents.List(params)
	n := 0
	for it.Next() {
		if n++; n > MaxListed {
			return nil, fmt.Errorf("payment: find message %s: more than %d payment intents between %s and %s: %w",
				messageID, MaxListed, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339),
				localError("window too large to list"))
		}
		pi := it.PaymentIntent()
		if pi.Metadata["message_id"] != messageID || !c.ours(pi.Metadata) {
			continue
		}
		if best == nil || better(pi, best) {
			best = pi
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("payment: find message %s: %w", messageID, c.newError(err))
	}
	if best == nil {
		return nil, fmt.Errorf("payment: no payment intent for message %s between %s and %s: %w",
			messageID, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), ErrNotFound)
	}
	return toCharge(best), nil
}

// Verdict is what a PaymentIntent's status means for the order.
type Verdict string

// The verdicts. Only VerdictPaid means money moved.
const (
	// VerdictPaid: succeeded.
	VerdictPaid Verdict = "paid"
	// VerdictProcessing: processing; Stripe settles it later (a webhook or
	// a later retrieve tells).
	VerdictProcessing Verdict = "processing"
	// VerdictFailed: requires_payment_method (the confirmation failed),
	// canceled, or requires_action (authentication needed, which an
	// off-session charge cannot provide). Final for this PaymentIntent.
	VerdictFailed Verdict = "failed"
	// VerdictUnconfirmed: requires_confirmation, created and never
	// confirmed: confirming it is safe.
	VerdictUnconfirmed Verdict = "unconfirmed"
	// VerdictUnexpected: any other status (requires_capture, …): nothing
	// effectively asks for, so an operator must look.
	VerdictUnexpected Verdict = "unexpected"
)

// CodeAuthenticationRequired is the failure code of a PaymentIntent that
// asked for authentication (requires_action) during an off-session charge.
const CodeAuthenticationRequired = "authentication_required"

// Verdict maps the PaymentIntent's status to a Verdict and, for
// VerdictFailed, the failure and decline codes to record: Stripe's
// last_payment_error code, or for a canceled PaymentIntent its
// cancellation_reason.
func (c *Charge) Verdict() (v Verdict, failureCode, declineCode string) {
	switch stripe.PaymentIntentStatus(c.Status) {
	case stripe.PaymentIntentStatusSucceeded:
		return VerdictPaid, "", ""
	case stripe.PaymentIntentStatusProcessing:
		return VerdictProcessing, "", ""
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		code := c.FailureCode
		if code == "" {
			code = string(stripe.PaymentIntentStatusRequiresPaymentMethod)
		}
		return VerdictFailed, code, c.DeclineCode
	case stripe.PaymentIntentStatusCanceled:
		code := c.CancellationReason
		if code == "" {
			code = string(stripe.PaymentIntentStatusCanceled)
		}
		return VerdictFailed, code, c.DeclineCode
	case stripe.PaymentIntentStatusRequiresAction:
		return VerdictFailed, CodeAuthenticationRequired, ""
	case stripe.PaymentIntentStatusRequiresConfirmation:
		return VerdictUnconfirmed, "", ""
	default:
		// requires_capture (a manual-capture authorisation), or a status
		// newer than this code.
		return VerdictUnexpected, "", ""
	}
}

// Differs reports how the PaymentIntent differs from the request it is
// taken for: "" when it matches, else a reason naming each field that
// differs. Amount and currency are always compared (currency without
// regard to case), and give both values; the payment method is compared
// only when both sides have one (Stripe detaches it from a declined
// PaymentIntent) and is named without its values. A test alias
// (pm_card_visa) is resolved by Stripe into a new PaymentMethod ID, so it
// is compared with the alias the PaymentIntent's metadata says was asked
// for (MetadataTestPaymentMethod); a real PaymentMethod ID only matches
// itself. A PaymentIntent found by
// a lookup (retrieve, list) that differs is not the request's payment,
// whatever its status.
func (c *Charge) Differs(amount int64, currency, paymentMethod string) string {
	var diffs []string
	if c.Amount != amount {
		diffs = append(diffs, fmt.Sprintf("amount %d, want %d", c.Amount, amount))
	}
	if !strings.EqualFold(c.Currency, currency) {
		diffs = append(diffs, fmt.Sprintf("currency %q, want %q", c.Currency, strings.ToLower(currency)))
	}
	if c.PaymentMethod != "" && paymentMethod != "" && c.PaymentMethod != paymentMethod &&
		!(IsTestPaymentMethod(paymentMethod) && c.RequestedTestPaymentMethod == paymentMethod) {
		diffs = append(diffs, "payment_method differs")
	}
	return strings.Join(diffs, "; ")
}
