package stripesim

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// maxAmount is the largest amount Stripe accepts, in the currency's smallest
// unit.
const maxAmount = 99999999

// PaymentIntent statuses.
const (
	statusRequiresPaymentMethod = "requires_payment_method"
	statusRequiresConfirmation  = "requires_confirmation"
	statusSucceeded             = "succeeded"
	statusCanceled              = "canceled"
	statusProcessing            = "processing"
	statusRequiresAction        = "requires_action"
	statusRequiresCapture       = "requires_capture"
)

// currencies are the ISO 4217 codes the simulator accepts, a subset of
// Stripe's list.
var currencies = map[string]bool{
	"aed": true, "aud": true, "bgn": true, "brl": true, "cad": true, "chf": true,
	"cny": true, "czk": true, "dkk": true, "eur": true, "gbp": true, "hkd": true,
	"huf": true, "idr": true, "ils": true, "inr": true, "isk": true, "jpy": true,
	"krw": true, "mxn": true, "myr": true, "nok": true, "nzd": true, "php": true,
	"pln": true, "ron": true, "sek": true, "sgd": true, "thb": true, "try": true,
	"twd": true, "usd": true, "zar": true,
}

// cardOutcome is what confirming with a test payment method does.
type cardOutcome struct {
	declineCode string // empty: the charge succeeds
	message     string
	// status, when set, is the status a confirmation answers 200 with
	// instead of succeeding or declining (see statuses.go).
	status string
	// settlesDeclined, for status processing, makes the payment fail when
	// it settles instead of succeeding.
	settlesDeclined bool
	// refund is what becomes of a refund of the charge (see statuses.go).
	refund refundBehavior
}

// testPaymentMethods are the test payment methods the simulator knows.
var testPaymentMethods = map[string]cardOutcome{
	"pm_card_visa":       {},
	"pm_card_visa_debit": {},
	"pm_card_mastercard": {},
	"pm_card_amex":       {},
	"pm_card_chargeDeclined": {
		declineCode: "generic_decline",
		message:     "Your card was declined.",
	},
	"pm_card_chargeDeclinedInsufficientFunds": {
		declineCode: "insufficient_funds",
		message:     "Your card has insufficient funds.",
	},
	// Methods that end in another status: see statuses.go.
	"pm_card_processing":             {status: statusProcessing},
	"pm_card_processingDeclined":     {status: statusProcessing, settlesDeclined: true},
	"pm_card_authenticationRequired": {status: statusRequiresAction},
	"pm_card_requiresPaymentMethod":  {status: statusRequiresPaymentMethod, declineCode: "generic_decline", message: "Your card was declined."},
	"pm_card_requiresCapture":        {status: statusRequiresCapture},
	"pm_card_canceled":               {status: statusCanceled},
	// Methods whose charge succeeds but whose refunds change status later:
	// see statuses.go.
	"pm_card_pendingRefund": {refund: refundStartsPending},
	"pm_card_refundFail":    {refund: refundFailsLater},
}

// paymentIntent is the simulator's PaymentIntent, in Stripe's JSON shape.
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	ReceiptEmail       *string           `json:"receipt_email"`
	SetupFutureUsage   *string           `json:"setup_future_usage"`
	Status             string            `json:"status"`

	// createdAt is when the PaymentIntent was created: Search sees it
	// only Options.SearchLag later. processingSince is when it entered
	// processing, and settlesDeclined how it will leave it.
	createdAt       time.Time
	processingSince time.Time
	settlesDeclined bool
	// cardAlias is the test payment method the PaymentIntent was given
	// (pm_card_visa): like Stripe, the simulator shows a new PaymentMethod
	// ID in PaymentMethod instead, and charges by the alias's outcome.
	cardAlias string
	// refundBehavior is what becomes of refunds of its charge, set by the
	// test payment method it succeeded with.
	refundBehavior refundBehavior
}

// setPaymentMethodLocked attaches the test payment method alias to pi the
// way Stripe does: a new PaymentMethod object (pm_…) is created from the
// alias, and its ID, not the alias, is the PaymentIntent's payment_method.
func (s *Server) setPaymentMethodLocked(pi *paymentIntent, alias string) {
	id := s.nextIDLocked("pm")
	pi.PaymentMethod = &id
	pi.cardAlias = alias
}

// operation performs a validated request and returns its answer. It runs
// with s.mu held.
type operation func(requestID string) response

var (
	intentPath  = regexp.MustCompile(`^/v1/payment_intents/([^/]+)$`)
	confirmPath = regexp.MustCompile(`^/v1/payment_intents/([^/]+)/confirm$`)
)

// route validates a request's parameters and returns the operation that
// performs it. Validation failures are not saved by the idempotency layer.
func (s *Server) route(method, path string, form url.Values) (operation, *apiError) {
	if op, e, ok := s.routeRefunds(method, path, form); ok {
		return op, e
	}
	switch {
	case method == http.MethodPost && path == "/v1/payment_intents":
		return s.create(form)
	case method == http.MethodGet && path == "/v1/payment_intents/search":
		return s.search(form)
	case method == http.MethodGet && path == "/v1/payment_intents":
		return s.list(form)
	case method == http.MethodPost && confirmPath.MatchString(path):
		return s.confirm(confirmPath.FindStringSubmatch(path)[1], form)
	case method == http.MethodGet && intentPath.MatchString(path):
		return s.retrieve(intentPath.FindStringSubmatch(path)[1], form)
	}
	return nil, &apiError{
		status: http.StatusNotFound,
		Type:   typeInvalidRequest,
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.",
			method, path),
	}
}

// Parameters accepted by the endpoints beyond the ones they interpret.
// They are checked for shape only.
var (
	createParams = map[string]bool{
		"amount": true, "currency": true, "payment_method": true, "confirm": true,
		"off_session": true, "description": true, "customer": true, "receipt_email": true,
		"capture_method": true, "confirmation_method": true, "return_url": true,
		"statement_descriptor": true, "statement_descriptor_suffix": true,
		"error_on_requires_action": true, "use_stripe_sdk": true, "setup_future_usage": true,
	}
	createPrefixes = []string{"metadata[", "expand[", "payment_method_types[", "automatic_payment_methods["}

	confirmParams = map[string]bool{
		"payment_method": true, "off_session": true, "return_url": true, "receipt_email": true,
		"error_on_requires_action": true, "use_stripe_sdk": true, "setup_future_usage": true,
	}
	confirmPrefixes = []string{"expand[", "payment_method_types["}

	readPrefixes = []string{"expand["}
)

// checkKnown rejects parameters an endpoint does not accept.
func checkKnown(form url.Values, names map[string]bool, prefixes []string) *apiError {
	for name := range form {
		if names[name] || hasAnyPrefix(name, prefixes) {
			continue
		}
		return invalidRequest(name, codeParameterUnknown, "Received unknown parameter: %s", name)
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// createRequest is a validated create request.
type createRequest struct {
	amount        int64
	currency      string
	paymentMethod string
	confirm       bool
	offSession    bool
	captureMethod string
	confirmMethod string
	customer      string
	description   string
	receiptEmail  string
	metadata      map[string]string
	methodTypes   []string
}

func (s *Server) create(form url.Values) (operation, *apiError) {
	if e := checkKnown(form, createParams, createPrefixes); e != nil {
		return nil, e
	}
	var req createRequest
	var e *apiError
	if req.amount, e = parseAmount(form); e != nil {
		return nil, e
	}
	if req.currency, e = parseCurrency(form); e != nil {
		return nil, e
	}
	if req.paymentMethod, e = parsePaymentMethod(form); e != nil {
		return nil, e
	}
	if req.confirm, e = parseBool(form, "confirm"); e != nil {
		return nil, e
	}
	if req.offSession, e = parseOffSession(form); e != nil {
		return nil, e
	}
	if req.metadata, e = parseMetadata(form); e != nil {
		return nil, e
	}
	if req.methodTypes, e = parseMethodTypes(form); e != nil {
		return nil, e
	}
	req.captureMethod = "automatic"
	if form.Has("capture_method") {
		switch v := form.Get("capture_method"); v {
		case "automatic", "automatic_async":
			req.captureMethod = v
		default:
			return nil, invalidRequest("capture_method", "",
				"Invalid capture_method: %q. The simulator supports automatic and automatic_async only.", v)
		}
	}
	req.confirmMethod = "automatic"
	if form.Has("confirmation_method") {
		switch v := form.Get("confirmation_method"); v {
		case "automatic", "manual":
			req.confirmMethod = v
		default:
			return nil, invalidRequest("confirmation_method", "", "Invalid confirmation_method: %q.", v)
		}
	}
	if req.confirm && req.paymentMethod == "" {
		return nil, invalidRequest("payment_method", codeParameterMissing,
			"You cannot confirm this PaymentIntent because it's missing a payment method. "+
				"To confirm the PaymentIntent, provide a payment_method.")
	}
	req.customer = form.Get("customer")
	req.description = form.Get("description")
	req.receiptEmail = form.Get("receipt_email")

	return func(requestID string) response {
		pi := &paymentIntent{
			ID:                 s.nextIDLocked("pi"),
			Object:             "payment_intent",
			Amount:             req.amount,
			CaptureMethod:      req.captureMethod,
			ConfirmationMethod: req.confirmMethod,
			Created:            s.now().Unix(),
			createdAt:          s.now(),
			Currency:           req.currency,
			Customer:           optional(req.customer),
			Description:        optional(req.description),
			Metadata:           req.metadata,
			PaymentMethodTypes: req.methodTypes,
			ReceiptEmail:       optional(req.receiptEmail),
			Status:             statusRequiresPaymentMethod,
		}
		pi.ClientSecret = pi.ID + "_secret_" + s.idStem
		if req.paymentMethod != "" {
			s.setPaymentMethodLocked(pi, req.paymentMethod)
		}
		if pi.PaymentMethod != nil {
			pi.Status = statusRequiresConfirmation
		}
		s.intents[pi.ID] = pi
		s.order = append(s.order, pi)
		s.evictIntentsLocked()
		if req.confirm {
			return s.attemptLocked(pi, req.offSession, requestID)
		}
		return jsonResponse(http.StatusOK, pi)
	}, nil
}

func (s *Server) confirm(id string, form url.Values) (operation, *apiError) {
	if e := checkKnown(form, confirmParams, confirmPrefixes); e != nil {
		return nil, e
	}
	pm, e := parsePaymentMethod(form)
	if e != nil {
		return nil, e
	}
	offSession, e := parseOffSession(form)
	if e != nil {
		return nil, e
	}
	return func(requestID string) response {
		pi, ok := s.intents[id]
		if !ok {
			return errorResponse(noSuchIntent(id), requestID)
		}
		s.advanceLocked(pi)
		switch pi.Status {
		case statusSucceeded, statusCanceled, statusProcessing, statusRequiresCapture:
			e := invalidRequest("", codeIntentUnexpectedState,
				"You cannot confirm this PaymentIntent because it has a status of %s.", pi.Status)
			e.PaymentIntent = pi
			return errorResponse(e, requestID)
		}
		if pm != "" {
			s.setPaymentMethodLocked(pi, pm)
		}
		if pi.PaymentMethod == nil {
			e := invalidRequest("payment_method", codeIntentUnexpectedState,
				"You cannot confirm this PaymentIntent because it's missing a payment method. "+
					"To confirm the PaymentIntent with %s, specify a payment method attached to this customer along with the customer ID.", pi.ID)
			e.PaymentIntent = pi
			return errorResponse(e, requestID)
		}
		return s.attemptLocked(pi, offSession, requestID)
	}, nil
}

func (s *Server) retrieve(id string, form url.Values) (operation, *apiError) {
	if e := checkKnown(form, map[string]bool{"client_secret": true}, readPrefixes); e != nil {
		return nil, e
	}
	return func(requestID string) response {
		pi, ok := s.intents[id]
		if !ok {
			return errorResponse(noSuchIntent(id), requestID)
		}
		s.advanceLocked(pi)
		return jsonResponse(http.StatusOK, pi)
	}, nil
}

func noSuchIntent(id string) *apiError {
	e := invalidRequest("intent", codeResourceMissing, "No such payment_intent: '%s'", id)
	e.status = http.StatusNotFound
	return e
}

// attemptLocked charges pi's payment method: the PaymentIntent either
// succeeds, counting a charge, or is declined. s.mu must be held.
func (s *Server) attemptLocked(pi *paymentIntent, offSession bool, requestID string) response {
	outcome := testPaymentMethods[pi.cardAlias]
	if outcome.status == statusRequiresAction && offSession {
		// Off-session, no customer is there to authenticate: Stripe
		// fails the confirmation with a 402 authentication_required, and
		// the PaymentIntent goes back to requires_payment_method.
		outcome = cardOutcome{declineCode: codeAuthenticationRequired,
			message: "Your card was declined. This transaction requires authentication."}
	} else if outcome.status != "" {
		return s.enterStatusLocked(pi, outcome)
	}
	chargeID := s.nextIDLocked("ch")
	pi.LatestCharge = &chargeID
	if outcome.declineCode == "" {
		s.succeedLocked(pi)
		return jsonResponse(http.StatusOK, pi)
	}

	s.stats.Declines++
	decline := func() *apiError {
		code, doc := codeCardDeclined, "https://stripe.com/docs/error-codes/card-declined"
		if outcome.declineCode == codeAuthenticationRequired {
			code, doc = codeAuthenticationRequired, "https://stripe.com/docs/error-codes/authentication-required"
		}
		return &apiError{
			status:      http.StatusPaymentRequired,
			Type:        typeCard,
			Code:        code,
			DeclineCode: outcome.declineCode,
			DocURL:      doc,
			Message:     outcome.message,
			Charge:      chargeID,
		}
	}
	// As on Stripe, a declined PaymentIntent loses its payment method and
	// records the decline as its last_payment_error.
	pi.Status = statusRequiresPaymentMethod
	pi.PaymentMethod, pi.cardAlias = nil, ""
	pi.LastPaymentError = decline()
	s.emitLocked(EventIntentFailed, pi)
	e := decline()
	e.PaymentIntent = pi
	return errorResponse(e, requestID)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func parseAmount(form url.Values) (int64, *apiError) {
	if !form.Has("amount") {
		return 0, missingParam("amount")
	}
	raw := form.Get("amount")
	if raw == "" {
		return 0, emptyParam("amount")
	}
	amount, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, invalidRequest("amount", codeParameterInvalidInteger, "Invalid integer: %s", raw)
	}
	if amount < 1 {
		return 0, invalidRequest("amount", codeAmountTooSmall, "This value must be greater than or equal to 1.")
	}
	if amount > maxAmount {
		return 0, invalidRequest("amount", codeAmountTooLarge, "Amount must be no more than %d", maxAmount)
	}
	return amount, nil
}

func parseCurrency(form url.Values) (string, *apiError) {
	if !form.Has("currency") {
		return "", missingParam("currency")
	}
	c := form.Get("currency")
	if c == "" {
		return "", emptyParam("currency")
	}
	if !currencies[c] {
		// Stripe sends no code with this error.
		return "", invalidRequest("currency", "",
			"Invalid currency: %s. Stripe currently supports these currencies: usd, eur, gbp, jpy, chf, ... (lowercase ISO codes).", c)
	}
	return c, nil
}

func parsePaymentMethod(form url.Values) (string, *apiError) {
	if !form.Has("payment_method") {
		return "", nil
	}
	pm := form.Get("payment_method")
	if pm == "" {
		return "", emptyParam("payment_method")
	}
	if _, ok := testPaymentMethods[pm]; !ok {
		return "", invalidRequest("payment_method", codeResourceMissing, "No such PaymentMethod: '%s'", pm)
	}
	return pm, nil
}

func parseBool(form url.Values, name string) (bool, *apiError) {
	if !form.Has(name) {
		return false, nil
	}
	switch v := form.Get(name); v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, invalidRequest(name, "", "Invalid boolean: %s", v)
	}
}

// parseOffSession accepts true, false and the legacy one_off and recurring.
func parseOffSession(form url.Values) (bool, *apiError) {
	switch form.Get("off_session") {
	case "one_off", "recurring":
		return true, nil
	}
	return parseBool(form, "off_session")
}

func parseMetadata(form url.Values) (map[string]string, *apiError) {
	md := make(map[string]string)
	for name, values := range form {
		key, ok := strings.CutPrefix(name, "metadata[")
		if !ok {
			continue
		}
		key, ok = strings.CutSuffix(key, "]")
		if !ok || key == "" || strings.ContainsAny(key, "[]") {
			return nil, invalidRequest(name, "", "Invalid metadata key: %s", name)
		}
		if len(key) > 40 {
			return nil, invalidRequest(name, "", "Metadata keys can have a maximum length of 40 characters.")
		}
		v := values[len(values)-1]
		if len(v) > 500 {
			return nil, invalidRequest(name, "", "Metadata values can have a maximum length of 500 characters.")
		}
		if v != "" { // an empty value unsets the key
			md[key] = v
		}
	}
	if len(md) > 50 {
		return nil, invalidRequest("metadata", "", "Metadata can have a maximum of 50 keys.")
	}
	return md, nil
}

// parseMethodTypes reads payment_method_types[N]; only card is supported.
func parseMethodTypes(form url.Values) ([]string, *apiError) {
	var types []string
	for name, values := range form {
		if !strings.HasPrefix(name, "payment_method_types[") {
			continue
		}
		for _, v := range values {
			if v != "card" {
				return nil, invalidRequest(name, "",
					"The payment method type %q is invalid; the simulator supports card only.", v)
			}
		}
		types = []string{"card"}
	}
	if types == nil {
		types = []string{"card"}
	}
	return types, nil
}
