// Package simfault is the fault injection shared by the provider simulators
// (stripesim and sendgridsim): the fault kinds, the Fault type and its JSON
// form, the list of armed faults, the control API under /_sim/, and the two
// things a fault does to a request whatever the provider, waiting (Sleep)
// and losing the answer (DropConnection).
//
// A simulator supplies what is its own: a match type M, which selects the
// requests a fault applies to (a struct of JSON-tagged string fields, an
// empty field matching anything), and what each Kind means for its API, for
// example which requests error_after lets through before answering an error.
// It re-exports the shared names as aliases (type Fault =
// simfault.Fault[Match]) so that its callers see one package.
package simfault

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Kind names one way a simulated request can misbehave. The values are the
// kind strings of the control API's JSON; each simulator documents what a
// kind does to its API.
type Kind string

// The fault kinds.
const (
	// ErrorBefore answers Fault.Status (default 500) without performing the
	// request.
	ErrorBefore Kind = "error_before"
	// ErrorAfter performs the request, then answers Fault.Status (default
	// 500): the client sees a failure for a request that took effect.
	ErrorAfter Kind = "error_after"
	// LostAfter performs the request, then drops the connection without
	// answering: the client sees a transport error for a request that took
	// effect.
	LostAfter Kind = "lost_after"
	// RateLimit answers 429 without performing the request.
	RateLimit Kind = "rate_limit"
	// Delay waits Fault.Delay before the request goes on. A client that
	// goes away meanwhile does not stop a request the provider received:
	// the simulators carry it out at the delay's end.
	Delay Kind = "delay"
)

// Valid reports whether k is one of the defined fault kinds.
func (k Kind) Valid() bool {
	switch k {
	case ErrorBefore, ErrorAfter, LostAfter, RateLimit, Delay:
		return true
	}
	return false
}

// Fault makes the requests selected by Match misbehave in the way Kind
// describes. M is the simulator's match type.
//
// In JSON (the control API) a Fault is
//
//	{"match":{…},"kind":"error_before","status":503,"delay_ms":250,"times":1}
//
// where every member but kind may be left out, and the delay may instead be
// given as a Go duration string, "delay":"1.5s". Unknown members are
// rejected, so that a misspelt member does not silently widen a fault.
type Fault[M any] struct {
	// Match selects the requests the fault applies to.
	Match M
	// Kind is what the fault does.
	Kind Kind
	// Status is the HTTP status of error_before and error_after faults:
	// 400 to 599, 0 meaning 500. Other kinds ignore it.
	Status int
	// Delay is how long a delay fault waits. Other kinds ignore it.
	Delay time.Duration
	// Times is how many requests the fault fires for before it is removed;
	// 0 means every matching request until the faults are cleared.
	Times int
}

// Validate reports what is wrong with f, if anything: it needs a known
// kind, a status of 400 to 599 (or 0) for error_before and error_after, a
// positive delay for delay, and a Times that is not negative. What a kind
// ignores is not checked.
func (f Fault[M]) Validate() error {
	switch f.Kind {
	case ErrorBefore, ErrorAfter:
		if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
			return fmt.Errorf("fault status %d is not an error status (400 to 599)", f.Status)
		}
	case LostAfter, RateLimit:
	case Delay:
		if f.Delay <= 0 {
			return fmt.Errorf("delay fault needs a positive delay, got %s", f.Delay)
		}
	default:
		return fmt.Errorf("unknown fault kind %q (want %s, %s, %s, %s or %s)", f.Kind,
			ErrorBefore, ErrorAfter, LostAfter, RateLimit, Delay)
	}
	if f.Times < 0 {
		return fmt.Errorf("fault times %d is negative", f.Times)
	}
	return nil
}

// ErrorStatus is the status an error_before or error_after fault answers:
// Status, or 500 when Status is 0.
func (f Fault[M]) ErrorStatus() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

// wire is the JSON form of a Fault. Remaining is only written, by
// GET /_sim/faults (see Armed).
type wire[M any] struct {
	Match     M      `json:"match"`
	Kind      Kind   `json:"kind"`
	Status    int    `json:"status,omitempty"`
	DelayMS   int64  `json:"delay_ms,omitempty"`
	Delay     string `json:"delay,omitempty"`
	Times     int    `json:"times,omitempty"`
	Remaining *int   `json:"remaining,omitempty"`
}

func (f Fault[M]) wire() wire[M] {
	return wire[M]{
		Match:   f.Match,
		Kind:    f.Kind,
		Status:  f.Status,
		DelayMS: f.Delay.Milliseconds(),
		Times:   f.Times,
	}
}

// MarshalJSON encodes f in the control API's form, with Delay in delay_ms.
func (f Fault[M]) MarshalJSON() ([]byte, error) {
	return json.Marshal(f.wire())
}

// UnmarshalJSON decodes the control API's form of a fault, rejecting
// unknown members and the read-only remaining. It does not validate the
// fault; see Validate.
func (f *Fault[M]) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wire[M]
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("decode fault: %w", err)
	}
	if w.Remaining != nil {
		return errors.New("decode fault: remaining is read-only")
	}
	delay := time.Duration(w.DelayMS) * time.Millisecond
	if w.Delay != "" {
		if w.DelayMS != 0 {
			return errors.New("decode fault: give either delay or delay_ms, not both")
		}
		d, err := time.ParseDuration(w.Delay)
		if err != nil {
			return fmt.Errorf("decode fault: delay: %w", err)
		}
		delay = d
	}
	*f = Fault[M]{Match: w.Match, Kind: w.Kind, Status: w.Status, Delay: delay, Times: w.Times}
	return nil
}
