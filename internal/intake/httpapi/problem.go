package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemType names a kind of refusal; it is the problem document's "type",
// as urn:effectively:problem:NAME.
type ProblemType string

// The problem types the API answers with, each with one status.
const (
	ProblemUnauthorized     ProblemType = "unauthorized"             // 401: no token, or one not in the tokens file
	ProblemForbiddenType    ProblemType = "forbidden-type"           // 403: the token may not submit or read this type
	ProblemMissingKey       ProblemType = "missing-idempotency-key"  // 400
	ProblemKeyMismatch      ProblemType = "idempotency-key-mismatch" // 400: the body's id differs from the header
	ProblemInvalidMessage   ProblemType = "invalid-message"          // 400, quarantined
	ProblemUnknownType      ProblemType = "unknown-type"             // 400, quarantined
	ProblemTooLarge         ProblemType = "too-large"                // 413
	ProblemPayloadMismatch  ProblemType = "payload-mismatch"         // 422, quarantined
	ProblemInFlight         ProblemType = "request-in-flight"        // 409
	ProblemRateLimited      ProblemType = "rate-limited"             // 429
	ProblemUnavailable      ProblemType = "unavailable"              // 503: Postgres unreachable, nothing recorded
	ProblemNotFound         ProblemType = "not-found"                // 404
	ProblemMethodNotAllowed ProblemType = "method-not-allowed"       // 405
)

// Problem is an RFC 9457 problem document.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// Field is the JSON path of the offending value ("data.amount").
	Field string `json:"field,omitempty"`
	// Code is the message package's code (missing, wrong_type, invalid, …).
	Code string `json:"code,omitempty"`
	// MessageID names the message, when known.
	MessageID string `json:"message_id,omitempty"`
	// QuarantineID is the quarantine row that keeps the message.
	QuarantineID int64 `json:"quarantine_id,omitempty"`
}

var problemTitles = map[ProblemType]string{
	ProblemUnauthorized:     "A bearer token from the tokens file is required",
	ProblemForbiddenType:    "This token may not submit or read this message type",
	ProblemMissingKey:       "The Idempotency-Key header is required",
	ProblemKeyMismatch:      "The Idempotency-Key header differs from the message's id",
	ProblemInvalidMessage:   "The message is invalid; it is quarantined",
	ProblemUnknownType:      "The message type is unknown; the message is quarantined",
	ProblemTooLarge:         "The request body is over the limit",
	ProblemPayloadMismatch:  "The Idempotency-Key was used with another payload; this one is quarantined",
	ProblemInFlight:         "A request with this Idempotency-Key is still being processed",
	ProblemRateLimited:      "Too many requests for this token",
	ProblemUnavailable:      "The inbox is unavailable; nothing was recorded",
	ProblemNotFound:         "No record of this message",
	ProblemMethodNotAllowed: "Method not allowed",
}

var problemStatus = map[ProblemType]int{
	ProblemUnauthorized:     http.StatusUnauthorized,
	ProblemForbiddenType:    http.StatusForbidden,
	ProblemMissingKey:       http.StatusBadRequest,
	ProblemKeyMismatch:      http.StatusBadRequest,
	ProblemInvalidMessage:   http.StatusBadRequest,
	ProblemUnknownType:      http.StatusBadRequest,
	ProblemTooLarge:         http.StatusRequestEntityTooLarge,
	ProblemPayloadMismatch:  http.StatusUnprocessableEntity,
	ProblemInFlight:         http.StatusConflict,
	ProblemRateLimited:      http.StatusTooManyRequests,
	ProblemUnavailable:      http.StatusServiceUnavailable,
	ProblemNotFound:         http.StatusNotFound,
	ProblemMethodNotAllowed: http.StatusMethodNotAllowed,
}

// newProblem returns the problem document of t for the request r.
func newProblem(t ProblemType, r *http.Request, detail string) Problem {
	return Problem{Type: "urn:effectively:problem:" + string(t), Title: problemTitles[t], Status: problemStatus[t], Detail: detail, Instance: r.URL.Path}
}

// writeProblem answers with p as application/problem+json; retryAfter > 0
// adds Retry-After in seconds.
func writeProblem(w http.ResponseWriter, p Problem, retryAfter int) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="effectively"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON answers with v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
