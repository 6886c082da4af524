package stripesim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/simlimit"
)

// RateLimits are Stripe's rate limits per account (API key): Global for all
// of an account's requests, Endpoint for each endpoint (method and path,
// object IDs aside: a create and a confirm are two endpoints). Stripe's
// defaults are 100/s global in live mode, 25/s in a sandbox, and 25/s per
// endpoint. A zero Rate is no limit.
type RateLimits struct {
	Global   simlimit.Rate `json:"global"`
	Endpoint simlimit.Rate `json:"endpoint"`
}

// Stripe-Rate-Limited-Reason values the simulator sends with a 429.
const (
	ReasonGlobalRate   = "global-rate"
	ReasonEndpointRate = "endpoint-rate"
)

// SetRateLimits replaces the rate limits; the zero value turns them off.
func (s *Server) SetRateLimits(rl RateLimits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimits = rl
}

// CurrentRateLimits returns the rate limits in force.
func (s *Server) CurrentRateLimits() RateLimits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimits
}

// checkRate takes the request's tokens, or answers 429 as Stripe does
// (before the idempotency layer, so nothing is saved under the key) and
// returns false.
func (s *Server) checkRate(w http.ResponseWriter, r *http.Request, requestID string) (outcome, bool) {
	s.mu.Lock()
	rl := s.rateLimits
	s.mu.Unlock()
	if !rl.Global.On() && !rl.Endpoint.On() {
		return outcome{}, true
	}
	account := apiKeyOf(r)
	op := r.Method + " " + operationOf(r.Method, r.URL.Path)
	if operationOf(r.Method, r.URL.Path) == "other" {
		op = r.Method + " " + r.URL.Path
	}
	ok, full, wait := s.limiter.Check([]string{"g\x00" + account, "e\x00" + account + "\x00" + op}, []simlimit.Rate{rl.Global, rl.Endpoint})
	if ok {
		return outcome{}, true
	}
	reason := ReasonGlobalRate
	if full == 1 {
		reason = ReasonEndpointRate
	}
	s.mu.Lock()
	s.stats.RateLimited++
	if s.stats.RateLimitedByReason == nil {
		s.stats.RateLimitedByReason = map[string]int{}
	}
	s.stats.RateLimitedByReason[reason]++
	s.mu.Unlock()
	h := w.Header()
	h.Set("Stripe-Rate-Limited-Reason", reason)
	h.Set("Retry-After", strconv.Itoa(simlimit.RetryAfterSeconds(wait)))
	return write(w, errorResponse(rateLimitError(), requestID)), false
}

// apiKeyOf is the request's API key, the account its limits count against.
func apiKeyOf(r *http.Request) string {
	if user, _, ok := r.BasicAuth(); ok {
		return user
	}
	_, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.TrimSpace(token)
}

// serveRateLimits reads (GET) or replaces (POST) the rate limits:
// {"global":{"per_second":25,"burst":25},"endpoint":{"per_second":25}}.
func (s *Server) serveRateLimits(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var rl RateLimits
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rl); err != nil || rl.Global.PerSecond < 0 || rl.Endpoint.PerSecond < 0 {
			simfault.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"global":{"per_second":N,"burst":N},"endpoint":{…}}, rates not negative`})
			return
		}
		s.SetRateLimits(rl)
	}
	simfault.WriteJSON(w, http.StatusOK, s.CurrentRateLimits())
}
