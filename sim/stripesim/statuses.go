package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A confirmed PaymentIntent is not always succeeded or declined. Test payment
// methods make the simulator answer each other status on demand (Stripe's
// own test methods where they exist, named after them where they do not):
//
//	pm_card_processing              processing; succeeds when it settles
//	pm_card_processingDeclined      processing; fails (card_declined) when it settles
//	pm_card_authenticationRequired  requires_action (3-D Secure needed); off-session
//	                                (off_session=true), as Stripe, a 402 card_error
//	                                authentication_required and requires_payment_method
//	pm_card_requiresPaymentMethod   requires_payment_method, answered 200 with
//	                                last_payment_error card_declined/generic_decline
//	pm_card_requiresCapture         requires_capture (a manual-capture authorisation)
//	pm_card_canceled                canceled, cancellation_reason automatic
//
// A processing PaymentIntent settles when SettleProcessing (or POST
// /_sim/payment_intents/settle) says so, or by itself Options.ProcessingDelay
// after it entered processing, seen at the next read of it. Only a
// PaymentIntent that reaches succeeded counts as a charge.
//
// Two more of Stripe's test methods succeed like pm_card_visa, but their
// refunds change status after they were created, and each change delivers
// charge.refund.updated with the Refund:
//
//	pm_card_pendingRefund  a refund is created pending, and later succeeds
//	pm_card_refundFail     a refund is created succeeded, and later fails
//	                       (failure_reason expired_or_canceled_card); its
//	                       amount is then refundable again
//
// A pending refund counts against what remains refundable, as on Stripe.
// The change happens when SettleRefund (or POST /_sim/refunds/settle) says
// so, or by itself Options.RefundSettleDelay after the refund was created,
// seen at the next read of it (retrieve, list, or a new refund of its
// PaymentIntent). An idempotent replay of the refund's creation answers
// what the creation answered (pending), as Stripe does; retrieve shows the
// present status.

// nextAction is a PaymentIntent's next_action.
type nextAction struct {
	Type string `json:"type"`
}

// DefaultSearchLag is how long a new PaymentIntent stays invisible to Search
// when Options.SearchLag is zero: Stripe documents Search as eventually
// consistent, "normally searchable within a minute".
const DefaultSearchLag = time.Minute

// NoSearchLag is the Options.SearchLag that makes Search see a
// PaymentIntent at once.
const NoSearchLag = time.Duration(-1)

// enterStatusLocked answers a confirmation whose test method ends in
// outcome.status with that status. s.mu must be held.
func (s *Server) enterStatusLocked(pi *paymentIntent, outcome cardOutcome) response {
	pi.Status = outcome.status
	switch outcome.status {
	case statusProcessing:
		chargeID := s.nextIDLocked("ch")
		pi.LatestCharge = &chargeID
		pi.processingSince = s.now()
		pi.settlesDeclined = outcome.settlesDeclined
		s.stats.Processing++
		s.emitLocked(EventIntentProcessing, pi)
	case statusRequiresAction:
		pi.NextAction = &nextAction{Type: "use_stripe_sdk"}
	case statusRequiresPaymentMethod:
		pi.PaymentMethod, pi.cardAlias = nil, ""
		pi.LastPaymentError = &apiError{
			Type: typeCard, Code: codeCardDeclined, DeclineCode: outcome.declineCode, Message: outcome.message,
			DocURL: "https://stripe.com/docs/error-codes/card-declined",
		}
		s.stats.Declines++
		s.emitLocked(EventIntentFailed, pi)
	case statusRequiresCapture:
		pi.AmountCapturable = pi.Amount
		chargeID := s.nextIDLocked("ch")
		pi.LatestCharge = &chargeID
	case statusCanceled:
		now := s.now().Unix()
		reason := "automatic"
		pi.CanceledAt, pi.CancellationReason = &now, &reason
		s.emitLocked(EventIntentCanceled, pi)
	}
	return jsonResponse(http.StatusOK, pi)
}

// succeedLocked makes pi succeeded and counts the charge. s.mu must be
// held.
func (s *Server) succeedLocked(pi *paymentIntent) {
	pi.Status = statusSucceeded
	pi.AmountReceived = pi.Amount
	pi.refundBehavior = testPaymentMethods[pi.cardAlias].refund
	pi.LastPaymentError = nil
	s.stats.Charges++
	if msg := pi.Metadata["message_id"]; msg != "" {
		s.stats.ChargesByMessage[msg]++
	}
	s.emitLocked(EventIntentSucceeded, pi)
}

// settleLocked ends pi's processing: succeeded, or back to
// requires_payment_method with a card_declined payment error. s.mu must be
// held.
func (s *Server) settleLocked(pi *paymentIntent, succeed bool) {
	if succeed {
		s.succeedLocked(pi)
		return
	}
	pi.Status = statusRequiresPaymentMethod
	pi.PaymentMethod, pi.cardAlias = nil, ""
	pi.LastPaymentError = &apiError{
		Type: typeCard, Code: codeCardDeclined, DeclineCode: "generic_decline", Message: "Your card was declined.",
		DocURL: "https://stripe.com/docs/error-codes/card-declined",
	}
	s.stats.Declines++
	s.emitLocked(EventIntentFailed, pi)
}

// advanceLocked settles pi if it has been processing for
// Options.ProcessingDelay. s.mu must be held.
func (s *Server) advanceLocked(pi *paymentIntent) {
	if pi.Status != statusProcessing || s.processingDelay <= 0 || s.now().Sub(pi.processingSince) < s.processingDelay {
		return
	}
	s.settleLocked(pi, !pi.settlesDeclined)
}

// ErrNotProcessing is returned by SettleProcessing for a PaymentIntent that
// does not exist or is not processing.
var ErrNotProcessing = errors.New("stripesim: no such processing payment intent")

// SettleProcessing ends the processing of PaymentIntent id: succeeded when
// succeed, else failed (requires_payment_method with card_declined).
func (s *Server) SettleProcessing(id string, succeed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.intents[id]
	if !ok || pi.Status != statusProcessing {
		return fmt.Errorf("%w: %s", ErrNotProcessing, id)
	}
	s.settleLocked(pi, succeed)
	return nil
}

// SetSearchLag sets how long a new PaymentIntent stays invisible to
// Search; NoSearchLag (or any negative value) makes it visible at once.
func (s *Server) SetSearchLag(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.searchLag = max(d, 0)
}

// searchableLocked reports whether Search sees pi yet. s.mu must be held.
func (s *Server) searchableLocked(pi *paymentIntent) bool {
	return s.now().Sub(pi.createdAt) >= s.searchLag
}

// intentListParams are the parameters accepted by the list endpoint.
var intentListParams = map[string]bool{
	"limit": true, "starting_after": true, "ending_before": true, "customer": true, "created": true,
	"created[gt]": true, "created[gte]": true, "created[lt]": true, "created[lte]": true,
}

// listResult is Stripe's list object.
type listResult struct {
	Object  string           `json:"object"`
	Data    []*paymentIntent `json:"data"`
	HasMore bool             `json:"has_more"`
	URL     string           `json:"url"`
}

// list answers GET /v1/payment_intents: newest first, filtered by created
// (exact or gt/gte/lt/lte, Unix seconds) and customer, paged with limit
// and starting_after or ending_before. A cursor that names no
// PaymentIntent is a 404 resource_missing on its parameter, as on Stripe.
// Unlike Search it is strongly consistent: a PaymentIntent is listed as
// soon as it exists.
func (s *Server) list(form url.Values) (operation, *apiError) {
	if e := checkKnown(form, intentListParams, readPrefixes); e != nil {
		return nil, e
	}
	var created []clause
	for _, op := range []string{"", "gt", "gte", "lt", "lte"} {
		name := "created"
		if op != "" {
			name += "[" + op + "]"
		}
		if !form.Has(name) {
			continue
		}
		n, err := strconv.ParseInt(form.Get(name), 10, 64)
		if err != nil {
			return nil, invalidRequest(name, codeParameterInvalidInteger, "Invalid integer: %s", form.Get(name))
		}
		created = append(created, clause{field: "created", op: map[string]string{"": ":", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[op], numValue: n})
	}
	if c := form.Get("customer"); c != "" {
		created = append(created, clause{field: "customer", op: ":", value: c})
	}
	limit := 10
	if form.Has("limit") {
		n, err := strconv.Atoi(form.Get("limit"))
		if err != nil || n < 1 || n > 100 {
			return nil, invalidRequest("limit", "", "This value must be between 1 and 100.")
		}
		limit = n
	}
	after, before := form.Get("starting_after"), form.Get("ending_before")
	if after != "" && before != "" {
		return nil, invalidRequest("starting_after", "", "You may only specify one of these parameters: starting_after, ending_before.")
	}
	return func(requestID string) response {
		cursor, param := after, "starting_after"
		if before != "" {
			cursor, param = before, "ending_before"
		}
		if _, ok := s.intents[cursor]; cursor != "" && !ok {
			// As Stripe, and as listRefunds: an unknown cursor is an
			// error, never the first page again.
			e := invalidRequest(param, codeResourceMissing, "No such payment_intent: '%s'", cursor)
			e.status = http.StatusNotFound
			return errorResponse(e, requestID)
		}
		// at is the cursor's place in matched (how many listed PaymentIntents
		// are newer), in whether it is listed itself: a cursor outside the
		// filters pages from its place in the order.
		var matched []*paymentIntent
		at, in := -1, false
		for i := len(s.order) - 1; i >= 0; i-- { // newest first
			pi := s.order[i]
			if pi.ID == cursor {
				at = len(matched)
			}
			if matchesAll(pi, created) {
				in = in || pi.ID == cursor
				s.advanceLocked(pi)
				matched = append(matched, pi)
			}
		}
		start, end := 0, len(matched)
		switch {
		case after != "" && in:
			start = at + 1
		case after != "":
			start = at
		case before != "":
			end = at
			start = max(end-limit, 0)
		}
		res := listResult{Object: "list", Data: []*paymentIntent{}, URL: "/v1/payment_intents"}
		if start < end {
			stop := min(start+limit, end)
			res.Data = matched[start:stop]
			res.HasMore = stop < end
		}
		return jsonResponse(http.StatusOK, res)
	}, nil
}

// operationOf names the API operation of a request, for
// Stats.RequestsByOperation.
func operationOf(method, path string) string {
	switch {
	case method == http.MethodPost && path == "/v1/payment_intents":
		return "create"
	case method == http.MethodGet && path == "/v1/payment_intents":
		return "list"
	case method == http.MethodGet && path == "/v1/payment_intents/search":
		return "search"
	case method == http.MethodPost && confirmPath.MatchString(path):
		return "confirm"
	case method == http.MethodGet && intentPath.MatchString(path):
		return "retrieve"
	case method == http.MethodPost && path == "/v1/refunds":
		return "refund"
	case method == http.MethodGet && path == "/v1/refunds":
		return "list_refunds"
	case method == http.MethodGet && refundPath.MatchString(path):
		return "retrieve_refund"
	}
	return "other"
}

// messageOf returns PaymentIntent id's metadata[message_id], or "".
func (s *Server) messageOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pi, ok := s.intents[id]; ok {
		return pi.Metadata["message_id"]
	}
	return ""
}
