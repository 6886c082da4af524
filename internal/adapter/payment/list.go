package payment

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// The paging lists the audit reads (internal/adapter/audit): one request
// per call, so a caller counts and bounds its Stripe requests exactly.
// Lists are strongly consistent, unlike Search.

// PageSize is how many objects one list request asks for: Stripe's maximum.
const PageSize = 100

// ListedIntent is a PaymentIntent as a list returns it.
type ListedIntent struct {
	Charge
	// Created is when Stripe created it.
	Created time.Time
	// OrderID is its metadata[order_id], 0 when absent or not a number.
	OrderID int64
}

// ListedRefund is a Refund as a list returns it.
type ListedRefund struct {
	Refund
	// Created is when Stripe created it.
	Created time.Time
	// Namespace is its metadata[effectively_namespace].
	Namespace string
}

// Ours reports whether metadata of a listed object names the Client's key
// namespace (see Config.Namespace).
func (c *Client) Ours(namespace string) bool { return namespace == c.namespace }

// ListIntentsPage lists, in one request, up to PageSize PaymentIntents
// created between from and to (inclusive, to the second), newest first,
// after the PaymentIntent ID after ("" for the first page). more reports
// that another page follows; its cursor is the last ID returned. Every
// PaymentIntent of the account is listed: Ours tells which are this
// deployment's.
func (c *Client) ListIntentsPage(ctx context.Context, from, to time.Time, after string) (page []ListedIntent, more bool, err error) {
	params := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: from.Unix(), LesserThanOrEqual: to.Unix(),
	}}
	params.Limit = stripe.Int64(PageSize)
	params.Single = true
	params.Context = ctx
	if after != "" {
		params.StartingAfter = stripe.String(after)
	}
	it := c.api.PaymentIntents.List(params)
	for it.Next() {
		pi := it.PaymentIntent()
		li := ListedIntent{Charge: *toCharge(pi), Created: time.Unix(pi.Created, 0).UTC()}
		li.OrderID, _ = strconv.ParseInt(pi.Metadata["order_id"], 10, 64)
		page = append(page, li)
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("payment: list payment intents: %w", c.newError(err))
	}
	return page, it.Meta().HasMore, nil
}

// ListRefundsPage lists, in one request, up to PageSize Refunds: of
// PaymentIntent paymentIntentID when it is not empty, else of the whole
// account created between from and to; newest first, after the Refund ID
// after ("" for the first page). more reports that another page follows.
func (c *Client) ListRefundsPage(ctx context.Context, paymentIntentID string, from, to time.Time, after string) (page []ListedRefund, more bool, err error) {
	params := &stripe.RefundListParams{}
	if paymentIntentID != "" {
		params.PaymentIntent = stripe.String(paymentIntentID)
	} else {
		params.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThanOrEqual: to.Unix()}
	}
	params.Limit = stripe.Int64(PageSize)
	params.Single = true
	params.Context = ctx
	if after != "" {
		params.StartingAfter = stripe.String(after)
	}
	it := c.api.Refunds.List(params)
	for it.Next() {
		r := it.Refund()
		page = append(page, ListedRefund{Refund: *toRefund(r), Created: time.Unix(r.Created, 0).UTC(), Namespace: r.Metadata[MetadataNamespace]})
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("payment: list refunds: %w", c.newError(err))
	}
	return page, it.Meta().HasMore, nil
}
