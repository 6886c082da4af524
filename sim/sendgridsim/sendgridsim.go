// Package sendgridsim simulates the part of the SendGrid v3 API that
// effectively uses, POST /v3/mail/send, so that the worker and its tests can
// run without the internet.
//
// A Server is an http.Handler. Serve it with httptest.NewServer in tests or
// with an http.Server in a development stack, and point the SendGrid client at
// it (sendgrid.GetRequest(key, "/v3/mail/send", server.URL)).
//
// The simulator answers like SendGrid does:
//
//   - 401 unless the request carries "Authorization: Bearer SG.…" (or exactly
//     Options.APIKey, when set);
//   - 413 for a body over 30 MB, 415 for a body that is not application/json;
//   - 400 with {"errors":[{"message":…,"field":…,"help":…}]} for a body that
//     does not parse or breaks a Mail Send rule, one entry per broken rule,
//     each naming the field, e.g. "personalizations.0.to.0.email";
//   - 200 with an empty body, delivering nothing, when
//     mail_settings.sandbox_mode.enable is true;
//   - 202 with an empty body and a unique X-Message-Id header otherwise.
//
// SendGrid has no idempotency key, so every accepted request is a delivery,
// even when it repeats an earlier one: the simulator records each delivery and
// counts deliveries per custom_args.idempotency_key (Stats.DeliveriesByKey),
// which is how tests prove that a message was mailed once.
//
// Faults make the simulator misbehave for chosen mails (see Fault and
// FaultKind): fail before delivering, fail after delivering, deliver and lose
// the response, rate limit, or answer late.
//
// # Control API
//
// The same handler serves a control API, for tests in other processes:
//
//	GET    /_sim/stats     Stats: {"deliveries":1,"deliveries_by_key":{"email:evt_1":1},"requests":1,...}
//	GET    /_sim/messages  the delivered mails (the last Options.MaxMessages), a JSON array of Delivered
//	GET    /_sim/faults    the active faults: {"faults":[{...,"times":2,"remaining":1}]}
//	POST   /_sim/faults    add a Fault: {"match":{"message_id":"evt_1"},"kind":"lost_after","times":1} (201)
//	DELETE /_sim/faults    remove every fault: {"ok":true}
//	POST   /_sim/reset     forget deliveries, counters and faults, restore Options.Latency: {"ok":true}
//	GET    /_sim/latency   the latency of every Mail Send request: {"latency_ms":5}
//	POST   /_sim/latency   set it: {"latency_ms":5}
//	GET    /_sim/rate_limit the Mail Send limit per API key: {"per_second":50,"burst":50}
//	POST   /_sim/rate_limit set it (per_second 0: no limit)
//
// Control errors answer 400 with {"error":"…"}; unknown members are errors,
// so that a misspelled fault fails loudly.
//
// # Bounds
//
// The recorded mails are bounded by Options.MaxMessages (default a
// million), the oldest forgotten first; Stats count every delivery since the
// last reset (DeliveriesByKey holds one entry per idempotency key). The
// Event Webhook queue holds at most WebhookConfig.QueueSize deliveries
// (default 4096); a delivery that finds it full is dropped and counted. A
// delivery is one event, or with WebhookOptions.BatchWindow one batch of
// the events queued within the window, of at most MaxBatchBytes.
//
// A Server is safe for concurrent use.
package sendgridsim

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/simlimit"
)

// MaxBodyBytes is the largest Mail Send request body accepted: SendGrid limits
// a mail, attachments included, to 30 MB.
const MaxBodyBytes = 30 << 20

// DefaultMaxMessages is how many delivered mails a Server records when
// Options.MaxMessages is zero: far more than a bench or soak run sends.
const DefaultMaxMessages = 1_000_000

// MailSendPath is the path of the simulated Mail Send endpoint.
const MailSendPath = "/v3/mail/send"

// Options configures a Server.
type Options struct {
	// Latency is added to every Mail Send request before it is answered.
	Latency time.Duration
	// Logger receives a record per Mail Send request. Nil discards them.
	// API keys are never logged.
	Logger *slog.Logger
	// APIKey, when not empty, is the only API key accepted. When empty, any
	// key of the form "SG.…" is accepted.
	APIKey string
	// MaxMessages bounds the delivered mails recorded (Messages, GET
	// /_sim/messages): past it the oldest is forgotten. Stats still count
	// every delivery. Zero means DefaultMaxMessages.
	MaxMessages int
	// RateLimit is Mail Send's limit per API key, answered with 429 past
	// it; SetRateLimit changes it. Zero: no limit.
	RateLimit simlimit.Rate
}

// Stats counts what a Server has seen since it was created or last reset.
type Stats struct {
	// Deliveries counts accepted mails, sandbox mails excluded.
	Deliveries int `json:"deliveries"`
	// DeliveriesByKey counts Deliveries by custom_args.idempotency_key; mails
	// without one are counted under "".
	DeliveriesByKey map[string]int `json:"deliveries_by_key"`
	// Requests counts Mail Send requests, whatever their outcome.
	Requests int `json:"requests"`
	// Rejected counts Mail Send requests answered with an error status
	// without delivering: authentication, validation, error_before and
	// rate_limit faults.
	Rejected int `json:"rejected"`
	// Sandbox counts valid mails sent in sandbox mode, which are answered
	// 200 and not delivered.
	Sandbox int `json:"sandbox"`
	// FaultsFired counts the faults that have fired.
	FaultsFired int `json:"faults_fired"`
	// RateLimited counts 429 answers of the rate limit (not of faults);
	// they are counted in Rejected too.
	RateLimited int `json:"rate_limited"`
}

// Delivered is a mail the simulator accepted for delivery.
type Delivered struct {
	// XMessageID is the X-Message-Id header answered (or, for error_after and
	// lost_after faults, that would have been answered).
	XMessageID string `json:"x_message_id"`
	// To lists the "to" addresses of every personalization, in order.
	To []string `json:"to"`
	// From is the sender address.
	From string `json:"from"`
	// Subject is the top-level subject, or the first personalization's when
	// it has one.
	Subject string `json:"subject"`
	// CustomArgs holds the top-level custom_args, overlaid by those of the
	// first personalization.
	CustomArgs map[string]string `json:"custom_args"`
	// Time is when the mail was accepted.
	Time time.Time `json:"time"`
}

// Server simulates the SendGrid v3 Mail Send API. Create it with New.
type Server struct {
	log    *slog.Logger
	apiKey string
	mux    *http.ServeMux

	mu          sync.Mutex
	baseLatency time.Duration
	latency     time.Duration
	faults      simfault.List[Match] // locks itself
	stats       Stats
	messages    []Delivered // oldest first, at most maxMessages
	maxMessages int
	rate        simlimit.Rate
	limiter     *simlimit.Limiter

	hooks atomic.Pointer[webhooks] // Event Webhook, when started (webhooks.go)
}

// New returns a Server configured by opts.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		log:         logger,
		apiKey:      opts.APIKey,
		baseLatency: max(opts.Latency, 0),
		maxMessages: opts.MaxMessages,
		mux:         http.NewServeMux(),
		rate:        opts.RateLimit,
		limiter:     simlimit.New(nil),
	}
	if s.maxMessages <= 0 {
		s.maxMessages = DefaultMaxMessages
	}
	s.resetLocked()
	s.mux.HandleFunc("POST "+MailSendPath, s.handleMailSend)
	s.registerControl()
	return s
}

// ServeHTTP serves the Mail Send endpoint and the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// SetLatency sets the latency added to every Mail Send request. A negative
// latency counts as zero.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// Reset forgets every delivery, counter and fault, and restores the latency
// given in Options.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *Server) resetLocked() {
	s.latency = s.baseLatency
	s.faults.Clear()
	s.stats = Stats{DeliveriesByKey: map[string]int{}}
	s.messages = nil
	s.limiter.Reset()
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.DeliveriesByKey = maps.Clone(s.stats.DeliveriesByKey)
	return st
}

// Messages returns a copy of the delivered mails, oldest first: the last
// Options.MaxMessages of them.
func (s *Server) Messages() []Delivered {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivered, len(s.messages))
	for i, m := range s.messages {
		m.To = append([]string(nil), m.To...)
		m.CustomArgs = maps.Clone(m.CustomArgs)
		out[i] = m
	}
	return out
}

// handleMailSend serves POST /v3/mail/send.
func (s *Server) handleMailSend(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s.mu.Lock()
	s.stats.Requests++
	latency := s.latency
	s.mu.Unlock()

	if !simfault.Sleep(ctx, latency) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "sendgridsim: client gone during latency")
		return
	}
	if status, e := s.authorize(r); status != 0 {
		s.reject(ctx, w, status, e)
		return
	}
	if !s.checkRate(w, r) {
		return
	}
	body, status, e := readBody(w, r)
	if status != 0 {
		s.reject(ctx, w, status, e)
		return
	}
	m, errs := parseMail(body)
	if len(errs) > 0 {
		s.reject(ctx, w, http.StatusBadRequest, errs...)
		return
	}

	// A delay holds a mail SendGrid has received. A client that gives up
	// meanwhile does not stop it: the mail is sent at the delay's end (and
	// any other fault for it still fires), though nobody reads the answer.
	delays, final := s.takeFaults(m)
	for _, f := range delays {
		s.log.LogAttrs(ctx, slog.LevelInfo, "sendgridsim: fault fired",
			slog.String("kind", string(f.Kind)), slog.Duration("delay", f.Delay),
			slog.String("idempotency_key", m.idempotencyKey))
		began := time.Now()
		if !simfault.Sleep(ctx, f.Delay) {
			s.log.LogAttrs(ctx, slog.LevelDebug, "sendgridsim: client gone during delay fault; the mail is sent at its end")
			time.Sleep(f.Delay - time.Since(began))
		}
	}
	if final != nil {
		s.log.LogAttrs(ctx, slog.LevelInfo, "sendgridsim: fault fired",
			slog.String("kind", string(final.Kind)), slog.Int("status", final.Status),
			slog.String("idempotency_key", m.idempotencyKey))
		switch final.Kind {
		case FaultErrorBefore:
			s.reject(ctx, w, final.ErrorStatus(), apiError{Message: "simulated failure before delivery"})
			return
		case FaultRateLimit:
			setRateLimitHeaders(w, 0)
			s.reject(ctx, w, http.StatusTooManyRequests, apiError{Message: "too many requests"})
			return
		case FaultErrorAfter:
			s.deliver(ctx, m)
			writeErrors(w, final.ErrorStatus(), apiError{Message: "simulated failure after delivery"})
			return
		case FaultLostAfter:
			s.deliver(ctx, m)
			simfault.DropConnection(w)
			return
		case simfault.Delay:
			// A delay was served before this point; the mail is delivered.
		}
	}

	id := s.deliver(ctx, m)
	if m.sandbox {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("X-Message-Id", id)
	w.WriteHeader(http.StatusAccepted)
}

// authorize returns a non-zero status and the error to answer when r does
// not carry an acceptable API key.
func (s *Server) authorize(r *http.Request) (int, apiError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return http.StatusUnauthorized, apiError{Message: "authorization required"}
	}
	key, ok := strings.CutPrefix(h, "Bearer ")
	valid := ok && strings.HasPrefix(key, "SG.") && len(key) > len("SG.")
	if s.apiKey != "" {
		valid = ok && key == s.apiKey
	}
	if !valid {
		return http.StatusUnauthorized, apiError{Message: "The provided authorization grant is invalid, expired, or revoked"}
	}
	return 0, apiError{}
}

// deliver records m as accepted and returns its X-Message-Id. A sandbox mail
// is only counted.
func (s *Server) deliver(ctx context.Context, m *parsedMail) string {
	id := newMessageID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.sandbox {
		s.stats.Sandbox++
		s.log.LogAttrs(ctx, slog.LevelDebug, "sendgridsim: sandbox mail accepted, not delivered",
			slog.String("idempotency_key", m.idempotencyKey))
		return ""
	}
	s.stats.Deliveries++
	s.stats.DeliveriesByKey[m.idempotencyKey]++
	s.messages = append(s.messages, Delivered{
		XMessageID: id,
		To:         m.to,
		From:       m.from,
		Subject:    m.subject,
		CustomArgs: m.customArgs,
		Time:       time.Now().UTC(),
	})
	s.emitLocked(s.messages[len(s.messages)-1])
	if len(s.messages) > s.maxMessages {
		s.messages[0] = Delivered{}
		s.messages = s.messages[1:]
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "sendgridsim: mail delivered",
		slog.String("x_message_id", id), slog.String("idempotency_key", m.idempotencyKey),
		slog.Int("deliveries_for_key", s.stats.DeliveriesByKey[m.idempotencyKey]))
	return id
}

// reject answers status with errs and counts the request as rejected.
func (s *Server) reject(ctx context.Context, w http.ResponseWriter, status int, errs ...apiError) {
	s.mu.Lock()
	s.stats.Rejected++
	s.mu.Unlock()
	attrs := []slog.Attr{slog.Int("status", status)}
	if len(errs) > 0 {
		attrs = append(attrs, slog.String("error", errs[0].Message))
		if errs[0].Field != nil {
			attrs = append(attrs, slog.String("field", *errs[0].Field))
		}
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "sendgridsim: mail rejected", attrs...)
	writeErrors(w, status, errs...)
}

// setRateLimitHeaders sets the headers SendGrid sends with a 429.
// X-RateLimit-Reset is a Unix time in seconds.
func setRateLimitHeaders(w http.ResponseWriter, remaining int) {
	h := w.Header()
	h.Set("X-RateLimit-Limit", "600")
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10))
}

// newMessageID returns a random 22-character ID in the alphabet of
// SendGrid's X-Message-Id (URL-safe base64 of 16 random bytes).
func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}
