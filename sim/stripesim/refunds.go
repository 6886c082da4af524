package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// Refund statuses.
const (
	refundSucceeded = "succeeded"
	refundPending   = "pending"
	refundFailed    = "failed"
)

// refundFailureReason is the failure_reason of a refund of a
// pm_card_refundFail charge, as in Stripe's test mode.
const refundFailureReason = "expired_or_canceled_card"

// refundBehavior is what becomes of the refunds of a charge, by the test
// payment method it was paid with (see statuses.go).
type refundBehavior uint8

const (
	// refundNormal: created succeeded, and stays so.
	refundNormal refundBehavior = iota
	// refundStartsPending (pm_card_pendingRefund): created pending, later
	// succeeded.
	refundStartsPending
	// refundFailsLater (pm_card_refundFail): created succeeded, later
	// failed, its amount refundable again.
	refundFailsLater
)

// Stripe's error codes for refunds.
const (
	codeChargeAlreadyRefunded = "charge_already_refunded"
	codeChargeNotRefundable   = "charge_not_refundable"
)

// refundReasons are the reasons Stripe accepts.
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// refund is the simulator's Refund, in Stripe's JSON shape.
type refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        *string           `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
	// FailureReason is set when Status is failed, and omitted otherwise.
	FailureReason string `json:"failure_reason,omitempty"`

	// next is the status the refund will move to (pending → succeeded,
	// succeeded → failed), or "" when it will not move again; since is
	// when it entered its present status.
	next  string
	since time.Time
}

var (
	refundPath = regexp.MustCompile(`^/v1/refunds/([^/]+)$`)

	refundParams   = map[string]bool{"payment_intent": true, "amount": true, "reason": true}
	refundPrefixes = []string{"metadata[", "expand["}
	listParams     = map[string]bool{
		"payment_intent": true, "limit": true, "starting_after": true,
		"created[gt]": true, "created[gte]": true, "created[lt]": true, "created[lte]": true,
	}
)

// routeRefunds returns the operation of a Refunds API request, and false
// when the request is not one.
func (s *Server) routeRefunds(method, path string, form url.Values) (operation, *apiError, bool) {
	switch {
	case method == http.MethodPost && path == "/v1/refunds":
		op, e := s.createRefund(form)
		return op, e, true
	case method == http.MethodGet && path == "/v1/refunds":
		op, e := s.listRefunds(form)
		return op, e, true
	case method == http.MethodGet && refundPath.MatchString(path):
		op, e := s.retrieveRefund(refundPath.FindStringSubmatch(path)[1], form)
		return op, e, true
	}
	return nil, nil, false
}

// createRefund validates a refund request. Like Stripe, it refunds only a
// succeeded PaymentIntent, and never more than what remains of its charge:
// a refund above it is refused (400 amount_too_large, or
// charge_already_refunded when nothing remains), and the refusal is saved
// under the idempotency key like any answer of an executed request.
func (s *Server) createRefund(form url.Values) (operation, *apiError) {
	if e := checkKnown(form, refundParams, refundPrefixes); e != nil {
		return nil, e
	}
	piID := form.Get("payment_intent")
	if piID == "" {
		return nil, invalidRequest("payment_intent", codeParameterMissing,
			"One of the following params should be provided for this request: payment_intent or charge. (The simulator supports payment_intent only.)")
	}
	var amount int64
	if form.Has("amount") {
		a, e := parseAmount(form)
		if e != nil {
			return nil, e
		}
		amount = a
	}
	reason := form.Get("reason")
	if form.Has("reason") && !refundReasons[reason] {
		return nil, invalidRequest("reason", "", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
	}
	md, e := parseMetadata(form)
	if e != nil {
		return nil, e
	}
	return func(requestID string) response {
		pi, ok := s.intents[piID]
		if !ok {
			return errorResponse(noSuchIntent(piID), requestID)
		}
		if pi.Status != statusSucceeded || pi.LatestCharge == nil {
			return errorResponse(invalidRequest("payment_intent", codeChargeNotRefundable,
				"This PaymentIntent (%s) does not have a successful charge to refund.", pi.ID), requestID)
		}
		s.advanceRefundsOfLocked(pi.ID) // a refund that failed meanwhile gives its amount back
		remaining := pi.AmountReceived - s.refunded[pi.ID]
		if amount == 0 {
			amount = remaining
		}
		switch {
		case remaining <= 0:
			s.stats.RefundsRefused++
			return errorResponse(invalidRequest("", codeChargeAlreadyRefunded,
				"Charge %s has already been refunded.", *pi.LatestCharge), requestID)
		case amount > remaining:
			s.stats.RefundsRefused++
			return errorResponse(invalidRequest("amount", codeAmountTooLarge,
				"Refund amount (%s) is greater than unrefunded amount on charge (%s)",
				formatMinor(amount, pi.Currency), formatMinor(remaining, pi.Currency)), requestID)
		}
		r := &refund{
			ID: s.nextIDLocked("re"), Object: "refund", Amount: amount, Charge: pi.LatestCharge,
			Created: s.now().Unix(), Currency: pi.Currency, Metadata: md, PaymentIntent: pi.ID,
			Reason: optional(reason), Status: refundSucceeded, since: s.now(),
		}
		switch pi.refundBehavior {
		case refundStartsPending:
			r.Status, r.next = refundPending, refundSucceeded
		case refundFailsLater:
			r.next = refundFailed
		case refundNormal:
		}
		s.refunds[r.ID] = r
		if r.next != "" {
			s.moving[r.ID] = r
		}
		s.refundOrder = append(s.refundOrder, r)
		s.refunded[pi.ID] += amount
		s.evictRefundsLocked()
		s.stats.Refunds++
		s.stats.RefundedAmount += amount
		if msg := md["message_id"]; msg != "" {
			s.stats.RefundsByMessage[msg]++
		}
		return jsonResponse(http.StatusOK, r)
	}, nil
}

func (s *Server) retrieveRefund(id string, form url.Values) (operation, *apiError) {
	if e := checkKnown(form, nil, readPrefixes); e != nil {
		return nil, e
	}
	return func(requestID string) response {
		r, ok := s.refunds[id]
		if !ok {
			e := invalidRequest("id", codeResourceMissing, "No such refund: '%s'", id)
			e.status = http.StatusNotFound
			return errorResponse(e, requestID)
		}
		s.advanceRefundLocked(r)
		return jsonResponse(http.StatusOK, r)
	}, nil
}

// listRefunds lists refunds, newest first, optionally of one PaymentIntent
// and within a created range (gt/gte/lt/lte, Unix seconds), paged with
// limit and starting_after. Unlike search, the list is strongly
// consistent: a refund is listed as soon as it is created.
func (s *Server) listRefunds(form url.Values) (operation, *apiError) {
	if e := checkKnown(form, listParams, readPrefixes); e != nil {
		return nil, e
	}
	limit := 10
	if form.Has("limit") {
		n, err := strconv.Atoi(form.Get("limit"))
		if err != nil || n < 1 || n > 100 {
			return nil, invalidRequest("limit", "", "Invalid limit: must be an integer between 1 and 100")
		}
		limit = n
	}
	var created []clause
	for _, op := range []string{"gt", "gte", "lt", "lte"} {
		name := "created[" + op + "]"
		if !form.Has(name) {
			continue
		}
		n, err := strconv.ParseInt(form.Get(name), 10, 64)
		if err != nil {
			return nil, invalidRequest(name, codeParameterInvalidInteger, "Invalid integer: %s", form.Get(name))
		}
		created = append(created, clause{field: "created", op: map[string]string{"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op], numValue: n})
	}
	piID, after := form.Get("payment_intent"), form.Get("starting_after")
	return func(requestID string) response {
		res := struct {
			Object  string    `json:"object"`
			Data    []*refund `json:"data"`
			HasMore bool      `json:"has_more"`
			URL     string    `json:"url"`
		}{Object: "list", Data: []*refund{}, URL: "/v1/refunds"}
		skipping := after != ""
		if skipping {
			if _, ok := s.refunds[after]; !ok {
				e := invalidRequest("starting_after", codeResourceMissing, "No such refund: '%s'", after)
				e.status = http.StatusNotFound
				return errorResponse(e, requestID)
			}
		}
		for i := len(s.refundOrder) - 1; i >= 0; i-- {
			r := s.refundOrder[i]
			if skipping {
				skipping = r.ID != after
				continue
			}
			if piID != "" && r.PaymentIntent != piID || !refundCreatedIn(r, created) {
				continue
			}
			if len(res.Data) == limit {
				res.HasMore = true
				break
			}
			s.advanceRefundLocked(r)
			res.Data = append(res.Data, r)
		}
		return jsonResponse(http.StatusOK, res)
	}, nil
}

// advanceRefundLocked moves r to its next status if it has been in its
// present one for Options.RefundSettleDelay. s.mu must be held.
func (s *Server) advanceRefundLocked(r *refund) {
	if r.next == "" || s.refundSettleDelay <= 0 || s.now().Sub(r.since) < s.refundSettleDelay {
		return
	}
	s.moveRefundLocked(r)
}

// advanceRefundsOfLocked advances every refund of PaymentIntent piID that
// is still to move. s.mu must be held.
func (s *Server) advanceRefundsOfLocked(piID string) {
	for _, r := range s.moving {
		if r.PaymentIntent == piID {
			s.advanceRefundLocked(r)
		}
	}
}

// moveRefundLocked moves r to its next status and delivers
// charge.refund.updated with it. A refund that fails gives its amount back
// to what remains refundable of its charge. s.mu must be held.
func (s *Server) moveRefundLocked(r *refund) {
	r.Status, r.next, r.since = r.next, "", s.now()
	delete(s.moving, r.ID)
	if r.Status == refundFailed {
		r.FailureReason = refundFailureReason
		if _, ok := s.refunded[r.PaymentIntent]; ok {
			s.refunded[r.PaymentIntent] -= r.Amount
		}
		s.stats.RefundsFailed++
		s.stats.RefundedAmount -= r.Amount
	}
	s.emitLocked(EventChargeRefundUpdated, r)
}

// ErrNoRefundToSettle is returned by SettleRefund for a refund that does
// not exist or has no status change to make.
var ErrNoRefundToSettle = errors.New("stripesim: no such refund with a status change to make")

// SettleRefund makes refund id's status change now, as Stripe's test mode
// does some time after the refund: a pending refund (of a
// pm_card_pendingRefund charge) succeeds; a succeeded refund of a
// pm_card_refundFail charge fails (failure_reason expired_or_canceled_card)
// and its amount is refundable again. Either delivers
// charge.refund.updated. Any other refund is refused with
// ErrNoRefundToSettle.
func (s *Server) SettleRefund(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.moving[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNoRefundToSettle, id)
	}
	s.moveRefundLocked(r)
	return nil
}

// refundCreatedIn reports whether r's created time satisfies every clause.
func refundCreatedIn(r *refund, clauses []clause) bool {
	for _, c := range clauses {
		if !compare(r.Created, c.op, c.numValue) {
			return false
		}
	}
	return true
}

// formatMinor renders an amount the way Stripe's refund errors do ($19.99).
func formatMinor(minor int64, currency string) string {
	if currency == "usd" {
		return fmt.Sprintf("$%d.%02d", minor/100, minor%100)
	}
	return fmt.Sprintf("%d %s", minor, currency)
}
