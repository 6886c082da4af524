package sendgridsim

import (
	"net/http"
	"time"

	"github.com/effectively/effectively/sim/simfault"
)

// The control API speaks plain JSON, not SendGrid's error format: errors are
// {"error":"…"} with status 400, and commands answer {"ok":true}, as the
// Stripe simulator's control API does. simfault serves all of it but
// GET /_sim/messages.

// registerControl adds the control API's routes to s.mux.
func (s *Server) registerControl() {
	simfault.Control[Match]{
		Stats:       func() any { return s.Stats() },
		Faults:      s.faults.Armed,
		AddFault:    s.faults.Add,
		ClearFaults: s.ClearFaults,
		Reset:       s.Reset,
		Latency:     s.currentLatency,
		SetLatency:  s.SetLatency,
	}.Register(s.mux)
	s.mux.HandleFunc("GET /_sim/messages", func(w http.ResponseWriter, _ *http.Request) {
		simfault.WriteJSON(w, http.StatusOK, s.Messages())
	})
	s.mux.HandleFunc("/_sim/rate_limit", s.serveRateLimit)
}

// currentLatency returns the latency added to every Mail Send request.
func (s *Server) currentLatency() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latency
}
