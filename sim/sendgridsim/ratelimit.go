package sendgridsim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/simlimit"
)

// SetRateLimit replaces the Mail Send rate limit per API key; the zero Rate
// turns it off.
func (s *Server) SetRateLimit(r simlimit.Rate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate = r
}

// RateLimit returns the Mail Send rate limit per API key in force.
func (s *Server) RateLimit() simlimit.Rate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rate
}

// checkRate takes the request's token from its API key's bucket, or
// answers 429 with SendGrid's X-RateLimit-* headers (no Retry-After), before
// anything is delivered, and returns false.
func (s *Server) checkRate(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	rate := s.rate
	s.mu.Unlock()
	if !rate.On() {
		return true
	}
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	ok, _, wait := s.limiter.Check([]string{key}, []simlimit.Rate{rate})
	if ok {
		return true
	}
	s.mu.Lock()
	s.stats.RateLimited++
	s.mu.Unlock()
	secs := simlimit.RetryAfterSeconds(wait)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(int(rate.PerSecond)))
	h.Set("X-RateLimit-Remaining", "0")
	// SendGrid sends no Retry-After: a client has only the reset time,
	// in whole seconds.
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Duration(secs)*time.Second).Unix(), 10))
	s.reject(r.Context(), w, http.StatusTooManyRequests, apiError{Message: "too many requests"})
	return false
}

// serveRateLimit reads (GET) or replaces (POST) the rate limit per key:
// {"per_second":50,"burst":50}.
func (s *Server) serveRateLimit(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var rate simlimit.Rate
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rate); err != nil || rate.PerSecond < 0 {
			simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"per_second":N,"burst":N}, the rate not negative`})
			return
		}
		s.SetRateLimit(rate)
	}
	simfault.WriteJSON(w, http.StatusOK, s.RateLimit())
}
