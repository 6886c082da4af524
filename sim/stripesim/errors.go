package stripesim

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Stripe's error types.
const (
	typeAPI            = "api_error"
	typeAuthentication = "authentication_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeInvalidRequest = "invalid_request_error"
)

// Stripe's error codes used by the simulator.
const (
	codeAmountTooLarge          = "amount_too_large"
	codeAmountTooSmall          = "amount_too_small"
	codeCardDeclined            = "card_declined"
	codeAuthenticationRequired  = "authentication_required"
	codeIdempotencyKeyInUse     = "idempotency_key_in_use"
	codeParameterInvalidEmpty   = "parameter_invalid_empty"
	codeParameterInvalidInteger = "parameter_invalid_integer"
	codeParameterMissing        = "parameter_missing"
	codeParameterUnknown        = "parameter_unknown"
	codeIntentUnexpectedState   = "payment_intent_unexpected_state"
	codeRateLimit               = "rate_limit"
	codeResourceMissing         = "resource_missing"
)

// apiError is the object Stripe puts under "error" in an error response, and
// also the shape of a PaymentIntent's last_payment_error.
type apiError struct {
	Charge        string         `json:"charge,omitempty"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
	RequestLogURL string         `json:"request_log_url,omitempty"`
	Type          string         `json:"type"`

	// status is the HTTP status the error is sent with.
	status int
}

// response is an HTTP answer the simulator has decided on, in the form the
// idempotency layer saves and replays.
type response struct {
	status int
	body   []byte
}

func jsonResponse(status int, v any) response {
	body, err := json.Marshal(v)
	if err != nil {
		// Every value marshalled here is built from plain strings, numbers
		// and maps, so this cannot happen.
		panic(fmt.Sprintf("stripesim: marshal response: %v", err))
	}
	return response{status: status, body: append(body, '\n')}
}

// errorResponse renders e the way Stripe does, with a request log URL for
// the request that produced it.
func errorResponse(e *apiError, requestID string) response {
	if e.Code != "" && e.DocURL == "" {
		e.DocURL = "https://stripe.com/docs/error-codes/" + hyphenate(e.Code)
	}
	if requestID != "" {
		e.RequestLogURL = "https://dashboard.stripe.com/test/logs/" + requestID
	}
	return jsonResponse(e.status, struct {
		Error *apiError `json:"error"`
	}{e})
}

func hyphenate(code string) string {
	b := []byte(code)
	for i, c := range b {
		if c == '_' {
			b[i] = '-'
		}
	}
	return string(b)
}

func invalidRequest(param, code, format string, args ...any) *apiError {
	return &apiError{
		status:  http.StatusBadRequest,
		Type:    typeInvalidRequest,
		Param:   param,
		Code:    code,
		Message: fmt.Sprintf(format, args...),
	}
}

func missingParam(param string) *apiError {
	return invalidRequest(param, codeParameterMissing, "Missing required param: %s.", param)
}

func emptyParam(param string) *apiError {
	return invalidRequest(param, codeParameterInvalidEmpty,
		"You passed an empty string for '%s'. We assume empty values are an attempt to unset a parameter; however '%s' cannot be unset. You should remove '%s' from your request or supply a non-empty value.",
		param, param, param)
}

func serverError(status int) *apiError {
	return &apiError{
		status:  status,
		Type:    typeAPI,
		Message: "An unknown error occurred while processing your request. Please retry with the same idempotency key or contact support.",
	}
}

func rateLimitError() *apiError {
	return &apiError{
		status:  http.StatusTooManyRequests,
		Type:    typeInvalidRequest,
		Code:    codeRateLimit,
		Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
	}
}
