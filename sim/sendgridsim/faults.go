package sendgridsim

import (
	"strings"

	"github.com/effectively/effectively/sim/simfault"
)

// FaultKind names a way the simulator misbehaves.
type FaultKind = simfault.Kind

// The fault kinds.
const (
	// FaultErrorBefore answers Fault.Status (default 500) with a SendGrid
	// error body and delivers nothing.
	FaultErrorBefore = simfault.ErrorBefore
	// FaultErrorAfter delivers the mail, then answers Fault.Status (default
	// 500): the client sees a failure for a mail that was sent.
	FaultErrorAfter = simfault.ErrorAfter
	// FaultLostAfter delivers the mail, then closes the connection without
	// answering: the client sees a transport error for a mail that was sent.
	FaultLostAfter = simfault.LostAfter
	// FaultRateLimit answers 429 with X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset headers and delivers nothing.
	FaultRateLimit = simfault.RateLimit
	// FaultDelay waits Fault.Delay before the request goes on, whether or
	// not the client is still there: SendGrid sends a mail it received
	// though its client gave up. It combines with any other fault that
	// fires for the same request.
	FaultDelay = simfault.Delay
)

// Match selects the mails a fault applies to. An empty field matches any
// mail; a mail must match every non-empty field.
type Match struct {
	// IdempotencyKey matches custom_args.idempotency_key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// MessageID matches custom_args.message_id.
	MessageID string `json:"message_id,omitempty"`
	// To matches any "to" address of any personalization, ignoring case.
	To string `json:"to,omitempty"`
}

// Fault makes the simulator misbehave for the mails it matches (see
// simfault.Fault for its fields and Validate).
//
// Faults apply only to Mail Send requests that pass authentication and
// validation. Of the faults matching a request, every delay fault fires, in
// the order the faults were added, followed by the first other fault, if any.
// A fault that fires uses up one of its Times.
//
// In JSON (the control API), a Fault is
//
//	{"match":{"idempotency_key":"…","message_id":"…","to":"…"},"kind":"error_before","status":503,"delay_ms":0,"times":1}
//
// where every member but kind may be left out, and the delay may also be
// given as a Go duration string, "delay":"1.5s".
type Fault = simfault.Fault[Match]

// matches reports whether m selects p.
func (p *parsedMail) matches(m Match) bool {
	if m.IdempotencyKey != "" && m.IdempotencyKey != p.idempotencyKey {
		return false
	}
	if m.MessageID != "" && m.MessageID != p.messageID {
		return false
	}
	if m.To == "" {
		return true
	}
	for _, to := range p.to {
		if strings.EqualFold(to, m.To) {
			return true
		}
	}
	return false
}

// AddFault adds f after the faults already active. It panics if f is
// invalid (see Fault.Validate), as that is a mistake in the test using it.
func (s *Server) AddFault(f Fault) {
	if err := f.Validate(); err != nil {
		panic("sendgridsim: AddFault: " + err.Error())
	}
	s.faults.Add(f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.faults.Clear()
}

// Faults returns the active faults, with Times set to the number of times
// each may still fire (0: unlimited).
func (s *Server) Faults() []Fault {
	armed := s.faults.Armed()
	out := make([]Fault, 0, len(armed))
	for _, a := range armed {
		f := a.Fault
		f.Times = a.Remaining
		out = append(out, f)
	}
	return out
}

// takeFaults returns the faults that fire for p: the matching delay faults,
// in the order they were added, and the first other matching fault, if
// any. Each uses up one of its times; exhausted faults are removed.
func (s *Server) takeFaults(p *parsedMail) (delays []Fault, final *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delays = s.faults.TakeAll(p.matches, FaultDelay)
	s.stats.FaultsFired += len(delays)
	if f, ok := s.faults.Take(p.matches, FaultErrorBefore, FaultErrorAfter, FaultLostAfter, FaultRateLimit); ok {
		s.stats.FaultsFired++
		final = &f
	}
	return delays, final
}
