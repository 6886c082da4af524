package sendgridsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The control API speaks plain JSON, not SendGrid's error format: errors are
// {"error":"…"} with status 400, and commands answer {"ok":true}, as the
// Stripe simulator's control API does.

// maxControlBody bounds control API request bodies.
const maxControlBody = 1 << 20

type latencyJSON struct {
	LatencyMS *int64 `json:"latency_ms"`
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleMessages(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Messages())
}

func (s *Server) handleListFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"faults": s.faultViews()})
}

func (s *Server) handleAddFault(w http.ResponseWriter, r *http.Request) {
	var in faultJSON
	if err := decodeStrict(w, r, &in); err != nil {
		writeControlError(w, err)
		return
	}
	f, err := in.fault()
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		writeControlError(w, err)
		return
	}
	s.addFault(f)
	writeJSON(w, http.StatusCreated, f)
}

func (s *Server) handleClearFaults(w http.ResponseWriter, _ *http.Request) {
	s.ClearFaults()
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) handleGetLatency(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ms := s.latency.Milliseconds()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, latencyJSON{LatencyMS: &ms})
}

func (s *Server) handleSetLatency(w http.ResponseWriter, r *http.Request) {
	var in latencyJSON
	if err := decodeStrict(w, r, &in); err != nil {
		writeControlError(w, err)
		return
	}
	if in.LatencyMS == nil || *in.LatencyMS < 0 {
		writeControlError(w, errors.New("latency_ms is required and must not be negative"))
		return
	}
	s.SetLatency(time.Duration(*in.LatencyMS) * time.Millisecond)
	writeJSON(w, http.StatusOK, in)
}

// decodeStrict decodes a single JSON value from r's body into v, rejecting
// unknown members so that a misspelled fault fails loudly.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

func writeControlError(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // the client may be gone; nothing to do about it
}
