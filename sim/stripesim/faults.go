package stripesim

import "github.com/effectively/effectively/sim/simfault"

// FaultKind names one way a request can misbehave. The values are also the
// kind strings of the control API's JSON.
type FaultKind = simfault.Kind

// The fault kinds. See the package documentation for what each one does.
const (
	// FaultErrorBefore answers an api_error without performing or saving
	// anything.
	FaultErrorBefore = simfault.ErrorBefore
	// FaultErrorAfter performs the request, then answers an api_error and
	// saves that answer under the idempotency key.
	FaultErrorAfter = simfault.ErrorAfter
	// FaultLostAfter performs the request and saves its real answer under the
	// idempotency key, then drops the connection without answering.
	FaultLostAfter = simfault.LostAfter
	// FaultRateLimit answers 429 rate_limit without performing or saving
	// anything.
	FaultRateLimit = simfault.RateLimit
	// FaultDelay sleeps Fault.Delay before the request is performed or
	// replayed, honouring the request's context.
	FaultDelay = simfault.Delay
)

// Match selects the requests a fault applies to. Empty fields match
// anything; a request matches when every non-empty field equals the
// request's value.
type Match struct {
	// MessageID is compared with the request's metadata[message_id]
	// parameter or, for a confirm, with its PaymentIntent's; it never
	// matches a GET.
	MessageID string `json:"message_id,omitempty"`
	// IdempotencyKey is compared with the Idempotency-Key header.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Path is compared with the request's URL path, for example
	// /v1/payment_intents.
	Path string `json:"path,omitempty"`
}

// Fault makes the requests selected by Match misbehave in the way Kind
// describes (see simfault.Fault for its fields and Validate).
//
// In JSON a Fault is written with snake_case fields, and Delay as
// milliseconds in delay_ms (a Go duration string in delay is also accepted):
//
//	{"match":{"message_id":"evt_1"},"kind":"delay","delay_ms":250,"times":1}
type Fault = simfault.Fault[Match]

// requestInfo is what faults are matched against.
type requestInfo struct {
	messageID string
	key       string
	path      string
}

// matches reports whether m selects r.
func (r requestInfo) matches(m Match) bool {
	return (m.MessageID == "" || m.MessageID == r.messageID) &&
		(m.IdempotencyKey == "" || m.IdempotencyKey == r.key) &&
		(m.Path == "" || m.Path == r.path)
}

// takeFault returns the first fault of one of the given kinds that matches
// r, consuming one of its firings. It may be called with or without s.mu.
func (s *Server) takeFault(r requestInfo, kinds ...FaultKind) (Fault, bool) {
	return s.faults.Take(r.matches, kinds...)
}

// AddFault arms f. Faults are consulted in the order they were added.
// AddFault does not validate f; a fault of an unknown kind never fires.
func (s *Server) AddFault(f Fault) {
	s.faults.Add(f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.faults.Clear()
}
