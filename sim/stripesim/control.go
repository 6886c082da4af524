package stripesim

import (
	"net/http"
	"time"

	"github.com/effectively/effectively/sim/simfault"
)

// controlMux routes the control API under /_sim/.
func (s *Server) controlMux() *http.ServeMux {
	mux := http.NewServeMux()
	simfault.Control[Match]{
		Stats:       func() any { return s.Stats() },
		Faults:      s.faults.Armed,
		AddFault:    s.AddFault,
		ClearFaults: s.ClearFaults,
		Reset:       s.Reset,
		Latency:     s.currentLatency,
		SetLatency:  s.SetLatency,
	}.Register(mux)
	return mux
}

// currentLatency returns the latency added to every API request.
func (s *Server) currentLatency() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latency
}
