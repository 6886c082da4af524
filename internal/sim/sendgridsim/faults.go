package sendgridsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FaultKind names a way the simulator misbehaves.
type FaultKind string

// The fault kinds.
const (
	// FaultErrorBefore answers Fault.Status (default 500) with a SendGrid
	// error body and delivers nothing.
	FaultErrorBefore FaultKind = "error_before"
	// FaultErrorAfter delivers the mail, then answers Fault.Status (default
	// 500): the client sees a failure for a mail that was sent.
	FaultErrorAfter FaultKind = "error_after"
	// FaultLostAfter delivers the mail, then closes the connection without
	// answering: the client sees a transport error for a mail that was sent.
	FaultLostAfter FaultKind = "lost_after"
	// FaultRateLimit answers 429 with X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset headers and delivers nothing.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultDelay waits Fault.Delay, or until the client goes away, before the
	// request goes on. It combines with any other fault that fires for the
	// same request.
	FaultDelay FaultKind = "delay"
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

// Fault makes the simulator misbehave for the mails it matches.
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
type Fault struct {
	// Match selects the mails the fault applies to.
	Match Match
	// Kind is what the fault does.
	Kind FaultKind
	// Status is the status answered by error_before and error_after faults:
	// 400 to 599, 0 meaning 500. Other kinds ignore it.
	Status int
	// Delay is how long a delay fault waits. Other kinds ignore it.
	Delay time.Duration
	// Times is how many requests the fault fires for; 0 means every
	// matching request.
	Times int
}

// faultJSON is the wire form of a Fault. Remaining is only written, by
// GET /_sim/faults: how many times the fault may still fire (absent:
// unlimited).
type faultJSON struct {
	Match     Match     `json:"match"`
	Kind      FaultKind `json:"kind"`
	Status    int       `json:"status,omitempty"`
	DelayMS   int64     `json:"delay_ms,omitempty"`
	Delay     string    `json:"delay,omitempty"`
	Times     int       `json:"times,omitempty"`
	Remaining *int      `json:"remaining,omitempty"`
}

// MarshalJSON encodes f in the control API form, with Delay as delay_ms.
func (f Fault) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultJSON{
		Match:   f.Match,
		Kind:    f.Kind,
		Status:  f.Status,
		DelayMS: f.Delay.Milliseconds(),
		Times:   f.Times,
	})
}

// UnmarshalJSON decodes f from the control API form.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var w faultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	v, err := w.fault()
	if err != nil {
		return err
	}
	*f = v
	return nil
}

func (w faultJSON) fault() (Fault, error) {
	f := Fault{
		Match:  w.Match,
		Kind:   w.Kind,
		Status: w.Status,
		Delay:  time.Duration(w.DelayMS) * time.Millisecond,
		Times:  w.Times,
	}
	if w.Delay != "" {
		if w.DelayMS != 0 {
			return Fault{}, errors.New("fault has both delay and delay_ms")
		}
		d, err := time.ParseDuration(w.Delay)
		if err != nil {
			return Fault{}, fmt.Errorf("fault delay: %w", err)
		}
		f.Delay = d
	}
	return f, nil
}

// Validate reports what is wrong with f, if anything.
func (f Fault) Validate() error {
	switch f.Kind {
	case FaultErrorBefore, FaultErrorAfter:
		if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
			return fmt.Errorf("fault status %d is not an error status (400 to 599)", f.Status)
		}
	case FaultLostAfter, FaultRateLimit:
	case FaultDelay:
		if f.Delay <= 0 {
			return fmt.Errorf("delay fault needs a positive delay, got %s", f.Delay)
		}
	default:
		return fmt.Errorf("unknown fault kind %q (want %s, %s, %s, %s or %s)", f.Kind,
			FaultErrorBefore, FaultErrorAfter, FaultLostAfter, FaultRateLimit, FaultDelay)
	}
	if f.Times < 0 {
		return fmt.Errorf("fault times %d is negative", f.Times)
	}
	return nil
}

// status returns the status an error fault answers.
func (f Fault) status() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

func (m Match) matches(p *parsedMail) bool {
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

// activeFault is a fault with the number of times it may still fire
// (negative: unlimited).
type activeFault struct {
	Fault
	left int
}

// AddFault adds f after the faults already active. It panics if f is
// invalid (see Fault.Validate), as that is a mistake in the test using it.
func (s *Server) AddFault(f Fault) {
	if err := f.Validate(); err != nil {
		panic("sendgridsim: AddFault: " + err.Error())
	}
	s.addFault(f)
}

func (s *Server) addFault(f Fault) {
	left := f.Times
	if left == 0 {
		left = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &activeFault{Fault: f, left: left})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Faults returns the active faults, with Times set to the number of times
// each may still fire (0: unlimited).
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, 0, len(s.faults))
	for _, af := range s.faults {
		f := af.Fault
		f.Times = max(af.left, 0)
		out = append(out, f)
	}
	return out
}

// faultViews describes the active faults for the control API.
func (s *Server) faultViews() []faultJSON {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]faultJSON, 0, len(s.faults))
	for _, af := range s.faults {
		v := faultJSON{
			Match:   af.Match,
			Kind:    af.Kind,
			Status:  af.Status,
			DelayMS: af.Delay.Milliseconds(),
			Times:   af.Times,
		}
		if left := af.left; left >= 0 {
			v.Remaining = &left
		}
		out = append(out, v)
	}
	return out
}

// takeFaults returns the faults that fire for p: the matching delay faults
// and the first other matching fault, in the order they were added. Each
// uses up one of its times; exhausted faults are removed.
func (s *Server) takeFaults(p *parsedMail) []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fired []Fault
	kept := s.faults[:0]
	terminal := false
	for _, af := range s.faults {
		fire := af.Match.matches(p) && (af.Kind == FaultDelay || !terminal)
		if fire {
			fired = append(fired, af.Fault)
			terminal = terminal || af.Kind != FaultDelay
			s.stats.FaultsFired++
			if af.left > 0 {
				af.left--
			}
		}
		if af.left != 0 {
			kept = append(kept, af)
		}
	}
	clear(s.faults[len(kept):])
	s.faults = kept
	return fired
}
