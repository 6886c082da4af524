package stripesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// FaultKind names one way a request can misbehave. The values are also the
// kind strings of the control API's JSON.
type FaultKind string

// The fault kinds. See the package documentation for what each one does.
const (
	// FaultErrorBefore answers an api_error without performing or saving
	// anything.
	FaultErrorBefore FaultKind = "error_before"
	// FaultErrorAfter performs the request, then answers an api_error and
	// saves that answer under the idempotency key.
	FaultErrorAfter FaultKind = "error_after"
	// FaultLostAfter performs the request and saves its real answer under the
	// idempotency key, then drops the connection without answering.
	FaultLostAfter FaultKind = "lost_after"
	// FaultRateLimit answers 429 rate_limit without performing or saving
	// anything.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultDelay sleeps Fault.Delay before the request is performed or
	// replayed, honouring the request's context.
	FaultDelay FaultKind = "delay"
)

// Valid reports whether k is one of the defined fault kinds.
func (k FaultKind) Valid() bool {
	switch k {
	case FaultErrorBefore, FaultErrorAfter, FaultLostAfter, FaultRateLimit, FaultDelay:
		return true
	}
	return false
}

// Match selects the requests a fault applies to. Empty fields match
// anything; a request matches when every non-empty field equals the
// request's value.
type Match struct {
	// MessageID is compared with the request's metadata[message_id]
	// parameter, so it never matches a GET.
	MessageID string `json:"message_id,omitempty"`
	// IdempotencyKey is compared with the Idempotency-Key header.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Path is compared with the request's URL path, for example
	// /v1/payment_intents.
	Path string `json:"path,omitempty"`
}

func (m Match) matches(r requestInfo) bool {
	return (m.MessageID == "" || m.MessageID == r.messageID) &&
		(m.IdempotencyKey == "" || m.IdempotencyKey == r.key) &&
		(m.Path == "" || m.Path == r.path)
}

// Fault makes the requests selected by Match misbehave in the way Kind
// describes.
//
// In JSON a Fault is written with snake_case fields, and Delay as
// milliseconds in delay_ms (a Go duration string in delay is also accepted):
//
//	{"match":{"message_id":"evt_1"},"kind":"delay","delay_ms":250,"times":1}
type Fault struct {
	// Match selects the requests the fault applies to.
	Match Match
	// Kind is what the fault does.
	Kind FaultKind
	// Status is the HTTP status of error_before and error_after faults;
	// 0 means 500. Other kinds ignore it.
	Status int
	// Delay is how long a delay fault sleeps. Other kinds ignore it.
	Delay time.Duration
	// Times is how many times the fault fires before it is removed; 0 means
	// until the faults are cleared.
	Times int
}

// Validate reports whether f is well formed: a known kind, a status of 400
// to 599 if one is set, a positive delay for delay faults and a Times that
// is not negative. AddFault does not validate; a fault of an unknown kind
// never fires.
func (f Fault) Validate() error {
	if !f.Kind.Valid() {
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return fmt.Errorf("fault status %d is not an error status (400-599)", f.Status)
	}
	if f.Kind == FaultDelay && f.Delay <= 0 {
		return errors.New("a delay fault needs a positive delay")
	}
	if f.Delay < 0 {
		return errors.New("fault delay is negative")
	}
	if f.Times < 0 {
		return errors.New("fault times is negative")
	}
	return nil
}

func (f Fault) status() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

// faultJSON is the wire form of a Fault.
type faultJSON struct {
	Match     Match     `json:"match"`
	Kind      FaultKind `json:"kind"`
	Status    int       `json:"status,omitempty"`
	DelayMS   int64     `json:"delay_ms,omitempty"`
	Delay     string    `json:"delay,omitempty"`
	Times     int       `json:"times,omitempty"`
	Remaining *int      `json:"remaining,omitempty"`
}

// MarshalJSON encodes f in the control API's form, with Delay in delay_ms.
func (f Fault) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultJSON{
		Match:   f.Match,
		Kind:    f.Kind,
		Status:  f.Status,
		DelayMS: f.Delay.Milliseconds(),
		Times:   f.Times,
	})
}

// UnmarshalJSON decodes the control API's form of a fault. Unknown fields
// are rejected so that a misspelt field does not silently widen a fault.
func (f *Fault) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var v faultJSON
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("decode fault: %w", err)
	}
	if v.Remaining != nil {
		return errors.New("decode fault: remaining is read-only")
	}
	delay := time.Duration(v.DelayMS) * time.Millisecond
	if v.Delay != "" {
		if v.DelayMS != 0 {
			return errors.New("decode fault: give either delay or delay_ms, not both")
		}
		d, err := time.ParseDuration(v.Delay)
		if err != nil {
			return fmt.Errorf("decode fault: delay: %w", err)
		}
		delay = d
	}
	*f = Fault{Match: v.Match, Kind: v.Kind, Status: v.Status, Delay: delay, Times: v.Times}
	return nil
}

// activeFault is a fault with the number of times it may still fire
// (negative: unlimited).
type activeFault struct {
	fault     Fault
	remaining int
}

// requestInfo is what faults are matched against.
type requestInfo struct {
	messageID string
	key       string
	path      string
}

// takeFaultLocked returns the first fault of one of the given kinds that
// matches r, consuming one of its firings. s.mu must be held.
func (s *Server) takeFaultLocked(r requestInfo, kinds ...FaultKind) (Fault, bool) {
	for i, af := range s.faults {
		if !kindIn(af.fault.Kind, kinds) || !af.fault.Match.matches(r) {
			continue
		}
		if af.remaining > 0 {
			af.remaining--
			if af.remaining == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return af.fault, true
	}
	return Fault{}, false
}

// takeFault is takeFaultLocked for callers that do not hold s.mu.
func (s *Server) takeFault(r requestInfo, kinds ...FaultKind) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeFaultLocked(r, kinds...)
}

func kindIn(k FaultKind, kinds []FaultKind) bool {
	for _, want := range kinds {
		if k == want {
			return true
		}
	}
	return false
}

// AddFault arms f. Faults are consulted in the order they were added.
func (s *Server) AddFault(f Fault) {
	remaining := f.Times
	if remaining <= 0 {
		remaining = -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &activeFault{fault: f, remaining: remaining})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// faultViews describes the active faults for the control API.
func (s *Server) faultViews() []faultJSON {
	s.mu.Lock()
	defer s.mu.Unlock()
	views := make([]faultJSON, 0, len(s.faults))
	for _, af := range s.faults {
		v := faultJSON{
			Match:   af.fault.Match,
			Kind:    af.fault.Kind,
			Status:  af.fault.Status,
			DelayMS: af.fault.Delay.Milliseconds(),
			Times:   af.fault.Times,
		}
		if af.remaining >= 0 {
			remaining := af.remaining
			v.Remaining = &remaining
		}
		views = append(views, v)
	}
	return views
}
