package stripesim

import (
	"encoding/json"
	"errors"
	"mime"
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
	mux.HandleFunc("POST /_sim/payment_intents/settle", s.serveSettle)
	mux.HandleFunc("POST /_sim/refunds/settle", s.serveSettleRefund)
	mux.HandleFunc("/_sim/rate_limits", s.serveRateLimits)
	return mux
}

// currentLatency returns the latency added to every API request.
func (s *Server) currentLatency() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latency
}

// serveSettle ends a processing PaymentIntent:
// {"id":"pi_…","succeed":true}. It answers 404 for a PaymentIntent that is
// not processing.
func (s *Server) serveSettle(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID      string `json:"id"`
		Succeed bool   `json:"succeed"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.ID == "" {
		simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"id\":\"pi_…\",\"succeed\":true|false}"})
		return
	}
	if err := s.SettleProcessing(req.ID, req.Succeed); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrNotProcessing) {
			status = http.StatusNotFound
		}
		simfault.WriteJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	simfault.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// serveSettleRefund makes a refund's status change now (SettleRefund): the
// form id=re_… or the JSON {"id":"re_…"}. It answers 404 for a refund with
// no status change to make.
func (s *Server) serveSettleRefund(w http.ResponseWriter, r *http.Request) {
	const usage = "want the form id=re_… or {\"id\":\"re_…\"}"
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	var id string
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" {
		var req struct {
			ID string `json:"id"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": usage})
			return
		}
		id = req.ID
	} else {
		if err := r.ParseForm(); err != nil {
			simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": usage})
			return
		}
		id = r.Form.Get("id")
	}
	if id == "" {
		simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": usage})
		return
	}
	if err := s.SettleRefund(id); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrNoRefundToSettle) {
			status = http.StatusNotFound
		}
		simfault.WriteJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	simfault.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
}
