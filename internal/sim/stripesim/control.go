package stripesim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// controlMux routes the control API under /_sim/.
func (s *Server) controlMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_sim/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeControl(w, http.StatusOK, s.Stats())
	})
	mux.HandleFunc("GET /_sim/faults", func(w http.ResponseWriter, _ *http.Request) {
		writeControl(w, http.StatusOK, map[string]any{"faults": s.faultViews()})
	})
	mux.HandleFunc("POST /_sim/faults", s.handleAddFault)
	mux.HandleFunc("DELETE /_sim/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		writeControl(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /_sim/reset", func(w http.ResponseWriter, _ *http.Request) {
		s.Reset()
		writeControl(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("GET /_sim/latency", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		latency := s.latency
		s.mu.Unlock()
		writeControl(w, http.StatusOK, latencyJSON{LatencyMS: latency.Milliseconds()})
	})
	mux.HandleFunc("POST /_sim/latency", s.handleSetLatency)
	return mux
}

type latencyJSON struct {
	LatencyMS int64 `json:"latency_ms"`
}

func (s *Server) handleAddFault(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeControlError(w, fmt.Errorf("read body: %w", err))
		return
	}
	var f Fault
	if err := json.Unmarshal(body, &f); err != nil {
		writeControlError(w, err)
		return
	}
	if err := f.Validate(); err != nil {
		writeControlError(w, err)
		return
	}
	s.AddFault(f)
	writeControl(w, http.StatusCreated, f)
}

func (s *Server) handleSetLatency(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	var v latencyJSON
	if err := dec.Decode(&v); err != nil {
		writeControlError(w, fmt.Errorf("decode latency: %w", err))
		return
	}
	if v.LatencyMS < 0 {
		writeControlError(w, fmt.Errorf("latency_ms %d is negative", v.LatencyMS))
		return
	}
	s.SetLatency(time.Duration(v.LatencyMS) * time.Millisecond)
	writeControl(w, http.StatusOK, v)
}

func writeControl(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do about it
}

func writeControlError(w http.ResponseWriter, err error) {
	writeControl(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}
