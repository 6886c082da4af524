package stripesim

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively/effectively/sim/simfault"
	"github.com/effectively/effectively/sim/simlimit"
)

// DefaultKeyTTL is how long idempotency keys are kept when Options.KeyTTL is
// zero. Stripe keeps them for at least 24 hours.
const DefaultKeyTTL = 24 * time.Hour

// DefaultMaxObjects is how many PaymentIntents, and how many Refunds, a
// Server keeps when Options.MaxObjects is zero: far more than a bench or
// soak run creates, so that they never meet an eviction.
const DefaultMaxObjects = 1_000_000

// DefaultMaxIdempotencyKeys is how many idempotency keys a Server keeps
// when Options.MaxIdempotencyKeys is zero.
const DefaultMaxIdempotencyKeys = 1_000_000

// MaxIdempotencyKeyLen is the longest Idempotency-Key Stripe accepts.
const MaxIdempotencyKeyLen = 255

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 1 << 20

// Options configures a Server. The zero value is usable.
type Options struct {
	// Latency is added to every API request before it is handled. It can be
	// changed later with SetLatency.
	Latency time.Duration
	// Logger receives one line per API request. Nil discards them.
	Logger *slog.Logger
	// Now is the clock used for created timestamps and key expiry. Nil means
	// time.Now.
	Now func() time.Time
	// KeyTTL is how long an idempotency key's saved response is replayed.
	// Zero means DefaultKeyTTL.
	KeyTTL time.Duration
	// SearchLag is how long a new PaymentIntent stays invisible to Search,
	// which Stripe documents as eventually consistent; retrieve and list see
	// it at once. Zero means DefaultSearchLag (a minute); NoSearchLag makes
	// Search see it at once.
	SearchLag time.Duration
	// MaxObjects bounds the PaymentIntents kept, and separately the
	// Refunds: past it the oldest one is forgotten (retrieve answers 404
	// resource_missing for it, and list and search no longer return it).
	// Zero means DefaultMaxObjects. Stats are counters and are not
	// affected.
	MaxObjects int
	// MaxIdempotencyKeys bounds the idempotency keys kept besides their
	// KeyTTL expiry: past it the oldest settled key is forgotten, and a
	// reuse of it executes as a new request. Zero means
	// DefaultMaxIdempotencyKeys.
	MaxIdempotencyKeys int
	// ProcessingDelay is how long a PaymentIntent confirmed with
	// pm_card_processing (or pm_card_processingDeclined) stays processing
	// before it settles by itself, seen at the next read of it. Zero means
	// it stays processing until SettleProcessing.
	ProcessingDelay time.Duration
	// RefundSettleDelay is how long a refund of a pm_card_pendingRefund
	// charge stays pending before it succeeds, and a refund of a
	// pm_card_refundFail charge stays succeeded before it fails, by
	// itself, seen at the next read of it (retrieve, list, or a new refund
	// of the same PaymentIntent). Zero means it changes only at
	// SettleRefund.
	RefundSettleDelay time.Duration
	// RateLimits are answered with 429 past them, per account (see
	// RateLimits); SetRateLimits changes them. Zero: no limit.
	RateLimits RateLimits
}

// Stats counts what the simulator has seen and done since it was created or
// last reset.
type Stats struct {
	// Charges counts PaymentIntents that reached status succeeded.
	Charges int `json:"charges"`
	// ChargesByMessage counts charges by their metadata[message_id]; charges
	// without one are not listed.
	ChargesByMessage map[string]int `json:"charges_by_message"`
	// Requests counts API requests (not control API requests) received.
	Requests int `json:"requests"`
	// Replays counts saved responses replayed for a reused idempotency key,
	// and ReplaysByKey counts them by key.
	Replays      int            `json:"replays"`
	ReplaysByKey map[string]int `json:"replays_by_key"`
	// IdempotencyErrors counts 400 idempotency_error answers: a key reused
	// with different parameters.
	IdempotencyErrors int `json:"idempotency_errors"`
	// Conflicts counts 409 answers: a key reused while its first request was
	// still in flight.
	Conflicts int `json:"conflicts"`
	// Declines counts confirmations that were declined.
	Declines int `json:"declines"`
	// Refunds counts refunds created (pending ones included), and
	// RefundedAmount their sum less that of the ones that failed since.
	Refunds        int   `json:"refunds"`
	RefundedAmount int64 `json:"refunded_amount"`
	// RefundsFailed counts refunds that failed after they were created
	// (pm_card_refundFail); they stay counted in Refunds.
	RefundsFailed int `json:"refunds_failed"`
	// RefundsByMessage counts refunds by their metadata[message_id].
	RefundsByMessage map[string]int `json:"refunds_by_message"`
	// RefundsRefused counts refunds refused for asking more than what
	// remains of the charge.
	RefundsRefused int `json:"refunds_refused"`
	// Processing counts confirmations that answered status processing.
	Processing int `json:"processing"`
	// RequestsByOperation counts API requests by operation: create,
	// confirm, retrieve, list, search, refund, list_refunds,
	// retrieve_refund; "other" for the rest.
	RequestsByOperation map[string]int `json:"requests_by_operation"`
	// RateLimited counts 429 answers of the rate limits (not of faults),
	// and RateLimitedByReason by Stripe-Rate-Limited-Reason.
	RateLimited         int            `json:"rate_limited"`
	RateLimitedByReason map[string]int `json:"rate_limited_by_reason"`
}

// Server simulates the Stripe PaymentIntents and Refunds APIs. It is an http.Handler and
// is safe for concurrent use. Create one with New.
type Server struct {
	now    func() time.Time
	log    *slog.Logger
	keyTTL time.Duration
	// processingDelay is Options.ProcessingDelay, refundSettleDelay
	// Options.RefundSettleDelay.
	processingDelay   time.Duration
	refundSettleDelay time.Duration
	idStem            string
	control           *http.ServeMux

	mu        sync.Mutex
	latency   time.Duration
	searchLag time.Duration
	seq       uint64
	faults    simfault.List[Match] // locks itself
	intents   map[string]*paymentIntent
	order     []*paymentIntent // creation order
	keys      map[string]*keyEntry
	keyOrder  []keyRef // keys by reservation, oldest first; may hold stale refs
	reserved  int      // reservations since the last sweep of expired keys
	// maxObjects and maxKeys are the bounds of Options.
	maxObjects int
	maxKeys    int
	// Refunds: by ID, in creation order, the amount refunded per
	// PaymentIntent (pending refunds included, failed ones not), and the
	// refunds whose status is still to change, by ID.
	refunds     map[string]*refund
	refundOrder []*refund
	refunded    map[string]int64
	moving      map[string]*refund
	stats       Stats
	// rateLimits are Options.RateLimits; limiter holds their buckets.
	rateLimits RateLimits
	limiter    *simlimit.Limiter

	hooks atomic.Pointer[webhooks] // signed events, when started (webhooks.go)
}

// keyRef names a key in keyOrder. It is stale once s.keys[key] is no
// longer entry (the key expired, was released or evicted).
type keyRef struct {
	key   string
	entry *keyEntry
}

// keyEntry is the idempotency layer's record of one key.
type keyEntry struct {
	hash      [sha256.Size]byte
	inFlight  bool
	resp      response
	requestID string
	created   time.Time
}

// New returns a Server configured by opts.
func New(opts Options) *Server {
	s := &Server{
		now:     opts.Now,
		log:     opts.Logger,
		keyTTL:  opts.KeyTTL,
		idStem:  randomStem(),
		latency: opts.Latency,

		processingDelay:   opts.ProcessingDelay,
		refundSettleDelay: opts.RefundSettleDelay,
		searchLag:         opts.SearchLag,
		maxObjects:        opts.MaxObjects,
		maxKeys:           opts.MaxIdempotencyKeys,
		rateLimits:        opts.RateLimits,
	}
	if s.maxObjects <= 0 {
		s.maxObjects = DefaultMaxObjects
	}
	if s.maxKeys <= 0 {
		s.maxKeys = DefaultMaxIdempotencyKeys
	}
	switch {
	case s.searchLag == 0:
		s.searchLag = DefaultSearchLag
	case s.searchLag < 0:
		s.searchLag = 0
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.keyTTL <= 0 {
		s.keyTTL = DefaultKeyTTL
	}
	s.limiter = simlimit.New(s.now)
	s.resetLocked()
	s.control = s.controlMux()
	return s
}

// randomStem returns a few random characters that make the IDs of one Server
// unlike those of another.
func randomStem() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	rand.Read(b) // never fails (crypto/rand panics instead)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// nextIDLocked returns a new object ID with the given prefix, like
// pi_Q3xZ9a000000000017. s.mu must be held.
func (s *Server) nextIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_%s%014d", prefix, s.idStem, s.seq)
}

// Reset forgets every PaymentIntent, idempotency key, statistic and fault.
// The latency and the rate limits are kept (their buckets refill), and IDs
// are never reused.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *Server) resetLocked() {
	s.faults.Clear()
	s.intents = make(map[string]*paymentIntent)
	s.order = nil
	s.keys = make(map[string]*keyEntry)
	s.keyOrder = nil
	s.reserved = 0
	s.refunds = make(map[string]*refund)
	s.refundOrder = nil
	s.refunded = make(map[string]int64)
	s.moving = make(map[string]*refund)
	s.stats = Stats{ChargesByMessage: make(map[string]int), RefundsByMessage: make(map[string]int), RequestsByOperation: make(map[string]int),
		RateLimitedByReason: make(map[string]int), ReplaysByKey: make(map[string]int)}
	if s.limiter != nil {
		s.limiter.Reset()
	}
}

// Stats returns a copy of the current statistics.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.ChargesByMessage = maps.Clone(s.stats.ChargesByMessage)
	st.RefundsByMessage = maps.Clone(s.stats.RefundsByMessage)
	st.RequestsByOperation = maps.Clone(s.stats.RequestsByOperation)
	st.RateLimitedByReason = maps.Clone(s.stats.RateLimitedByReason)
	st.ReplaysByKey = maps.Clone(s.stats.ReplaysByKey)
	return st
}

// SetLatency sets the latency added to every API request.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = max(d, 0)
}

// ServeHTTP serves the Stripe API under /v1/ and the control API under
// /_sim/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.control.ServeHTTP(w, r)
		return
	}
	s.serveAPI(w, r)
}

// outcome records how an API request was answered, for the log. aborted
// means the client left before anything was done; clientGone means it left
// during a delay and the request was carried out all the same, with status.
type outcome struct {
	status     int
	replayed   bool
	dropped    bool
	aborted    bool
	clientGone bool
	fault      FaultKind
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.mu.Lock()
	s.stats.Requests++
	s.stats.RequestsByOperation[operationOf(r.Method, r.URL.Path)]++
	latency := s.latency
	requestID := s.nextIDLocked("req")
	s.mu.Unlock()

	key := r.Header.Get("Idempotency-Key")
	h := w.Header()
	h.Set("Request-Id", requestID)
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	if v := r.Header.Get("Stripe-Version"); v != "" {
		h.Set("Stripe-Version", v)
	}

	out := s.handleAPI(w, r, requestID, key, latency)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "stripesim request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("request_id", requestID),
		slog.String("idempotency_key", key),
		slog.Int("status", out.status),
		slog.Bool("replayed", out.replayed),
		slog.Bool("dropped", out.dropped),
		slog.Bool("aborted", out.aborted),
		slog.Bool("client_gone", out.clientGone),
		slog.String("fault", string(out.fault)),
		slog.Duration("elapsed", time.Since(start)),
	)
}

// handleAPI runs the request pipeline: latency, authentication, parsing,
// early faults, validation, the idempotency layer, delay faults, execution,
// late faults, saving and answering.
func (s *Server) handleAPI(w http.ResponseWriter, r *http.Request, requestID, key string, latency time.Duration) outcome {
	ctx := r.Context()
	if !simfault.Sleep(ctx, latency) {
		return outcome{aborted: true}
	}
	if e := authenticate(r); e != nil {
		return write(w, errorResponse(e, requestID))
	}
	if out, ok := s.checkRate(w, r, requestID); !ok {
		return out
	}
	form, e := parseForm(w, r)
	if e != nil {
		return write(w, errorResponse(e, requestID))
	}
	info := requestInfo{messageID: form.Get("metadata[message_id]"), key: key, path: r.URL.Path}
	if m := confirmPath.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPost {
		info.messageID = s.messageOf(m[1]) // a confirm carries no metadata: use its PaymentIntent's
	}

	if f, ok := s.takeFault(info, FaultErrorBefore, FaultRateLimit); ok {
		e := rateLimitError()
		if f.Kind == FaultErrorBefore {
			e = serverError(f.ErrorStatus())
		}
		out := write(w, errorResponse(e, requestID))
		out.fault = f.Kind
		return out
	}
	if len(key) > MaxIdempotencyKeyLen {
		return write(w, errorResponse(invalidRequest("", "",
			"Idempotency-Key must be at most %d characters long; yours is %d.", MaxIdempotencyKeyLen, len(key)), requestID))
	}
	op, e := s.route(r.Method, r.URL.Path, form)
	if e != nil {
		return write(w, errorResponse(e, requestID))
	}

	idempotent := r.Method == http.MethodPost && key != ""
	if idempotent {
		saved, e := s.reserve(key, fingerprint(r.Method, r.URL.Path, form), requestID)
		if e != nil {
			return write(w, errorResponse(e, requestID))
		}
		if saved != nil {
			if f, ok := s.takeFault(info, FaultDelay); ok && !simfault.Sleep(ctx, f.Delay) {
				return outcome{aborted: true, fault: f.Kind}
			}
			h := w.Header()
			h.Set("Idempotent-Replayed", "true")
			h.Set("Original-Request", saved.requestID)
			out := write(w, saved.resp)
			out.replayed = true
			return out
		}
	}

	// A delay holds a request Stripe has received (its key reserved, so a
	// concurrent request with the key sees 409). A client that gives up
	// meanwhile does not stop it: Stripe carries it out at the delay's end
	// and saves its answer under the key, which a retry then replays.
	var abandoned *Fault
	if f, ok := s.takeFault(info, FaultDelay); ok {
		began := time.Now()
		if !simfault.Sleep(ctx, f.Delay) {
			abandoned = &f
			time.Sleep(f.Delay - time.Since(began))
		}
	}

	s.mu.Lock()
	resp := op(requestID)
	if abandoned != nil {
		if idempotent {
			s.saveLocked(key, resp)
		}
		s.mu.Unlock()
		return outcome{status: resp.status, clientGone: true, fault: abandoned.Kind}
	}
	late, hasLate := s.takeFault(info, FaultErrorAfter, FaultLostAfter)
	if hasLate && late.Kind == FaultErrorAfter {
		resp = errorResponse(serverError(late.ErrorStatus()), requestID)
	}
	if idempotent {
		s.saveLocked(key, resp)
	}
	s.mu.Unlock()

	if hasLate && late.Kind == FaultLostAfter {
		simfault.DropConnection(w)
		return outcome{dropped: true, fault: late.Kind}
	}
	out := write(w, resp)
	if hasLate {
		out.fault = late.Kind
	}
	return out
}

// reserve consults the idempotency layer for key. It returns the saved entry
// to replay, or an error to answer with, or neither when the key is now
// reserved for this request.
func (s *Server) reserve(key string, hash [sha256.Size]byte, requestID string) (*keyEntry, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if entry, ok := s.keys[key]; ok && !entry.inFlight && now.Sub(entry.created) > s.keyTTL {
		delete(s.keys, key)
	}
	entry, ok := s.keys[key]
	switch {
	case !ok:
		entry = &keyEntry{hash: hash, inFlight: true, requestID: requestID, created: now}
		s.keys[key] = entry
		s.keyOrder = append(s.keyOrder, keyRef{key, entry})
		s.reserved++
		if s.reserved >= 256 {
			s.sweepLocked(now)
		}
		s.evictKeysLocked()
		return nil, nil
	case entry.hash != hash:
		s.stats.IdempotencyErrors++
		return nil, &apiError{
			status: http.StatusBadRequest,
			Type:   typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. "+
				"Try using a key other than '%s' if you meant to execute a different request.", key),
		}
	case entry.inFlight:
		s.stats.Conflicts++
		return nil, &apiError{
			status: http.StatusConflict,
			Type:   typeIdempotency,
			Code:   codeIdempotencyKeyInUse,
			Message: "There is currently another in-progress request using this Stripe-Idempotency-Key " +
				"(that probably means you submitted twice, and the other request is still going through). Please try again later.",
		}
	default:
		s.stats.Replays++
		s.stats.ReplaysByKey[key]++
		saved := *entry
		return &saved, nil
	}
}

// saveLocked records resp as the answer for the reserved key. s.mu must be
// held.
func (s *Server) saveLocked(key string, resp response) {
	entry, ok := s.keys[key]
	if !ok {
		return // reset while the request was executing
	}
	entry.inFlight = false
	entry.resp = resp
	entry.created = s.now()
}

// sweepLocked drops expired keys, and the stale references to them in
// keyOrder. s.mu must be held.
func (s *Server) sweepLocked(now time.Time) {
	s.reserved = 0
	for key, entry := range s.keys {
		if !entry.inFlight && now.Sub(entry.created) > s.keyTTL {
			delete(s.keys, key)
		}
	}
	if len(s.keyOrder) > 2*len(s.keys)+256 {
		live := make([]keyRef, 0, len(s.keys))
		for _, ref := range s.keyOrder {
			if s.keys[ref.key] == ref.entry {
				live = append(live, ref)
			}
		}
		s.keyOrder = live
	}
}

// evictKeysLocked forgets the oldest settled keys while more than maxKeys
// are kept. A key whose request is still in flight is not forgotten (a
// concurrent retry must still meet the 409): it goes to the back of the
// line. s.mu must be held.
func (s *Server) evictKeysLocked() {
	for tries := len(s.keyOrder); len(s.keys) > s.maxKeys && tries > 0 && len(s.keyOrder) > 0; tries-- {
		ref := s.keyOrder[0]
		s.keyOrder[0] = keyRef{}
		s.keyOrder = s.keyOrder[1:]
		switch {
		case s.keys[ref.key] != ref.entry: // stale
		case ref.entry.inFlight:
			s.keyOrder = append(s.keyOrder, ref)
		default:
			delete(s.keys, ref.key)
		}
	}
}

// evictIntentsLocked forgets the oldest PaymentIntents (and what is
// refunded of them) while more than maxObjects are kept. s.mu must be
// held.
func (s *Server) evictIntentsLocked() {
	for len(s.order) > s.maxObjects {
		pi := s.order[0]
		s.order[0] = nil
		s.order = s.order[1:]
		delete(s.intents, pi.ID)
		delete(s.refunded, pi.ID)
	}
}

// evictRefundsLocked forgets the oldest Refunds while more than maxObjects
// are kept. s.mu must be held.
func (s *Server) evictRefundsLocked() {
	for len(s.refundOrder) > s.maxObjects {
		r := s.refundOrder[0]
		s.refundOrder[0] = nil
		s.refundOrder = s.refundOrder[1:]
		delete(s.refunds, r.ID)
		delete(s.moving, r.ID)
	}
}

// Objects reports how many PaymentIntents, Refunds and idempotency keys
// the Server holds now.
func (s *Server) Objects() (intents, refunds, keys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.intents), len(s.refunds), len(s.keys)
}

// fingerprint is a canonical hash of a request's method, path and
// parameters, independent of the order in which parameters were sent.
func fingerprint(method, path string, form url.Values) [sha256.Size]byte {
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	b.WriteString(path)
	for _, k := range slices.Sorted(maps.Keys(form)) {
		for _, v := range form[k] {
			b.WriteByte('\n')
			b.WriteString(url.QueryEscape(k))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
		}
	}
	return sha256.Sum256([]byte(b.String()))
}

// authenticate checks for a test secret or restricted key, sent as a bearer
// token or as the basic-auth user name.
func authenticate(r *http.Request) *apiError {
	var key string
	if user, _, ok := r.BasicAuth(); ok {
		key = user
	} else if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, token, _ := strings.Cut(auth, " ")
		if strings.EqualFold(scheme, "Bearer") {
			key = strings.TrimSpace(token)
		}
	}
	if key == "" {
		return &apiError{
			status: http.StatusUnauthorized,
			Type:   typeAuthentication,
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, " +
				"using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
		}
	}
	for _, prefix := range []string{"sk_test_", "rk_test_"} {
		if strings.HasPrefix(key, prefix) && len(key) > len(prefix) {
			return nil
		}
	}
	return &apiError{
		status:  http.StatusUnauthorized,
		Type:    typeAuthentication,
		Message: "Invalid API Key provided: " + maskKey(key),
	}
}

// maskKey shows at most the prefix and the last four characters of a key.
func maskKey(key string) string {
	prefix, _, found := strings.Cut(key, "_")
	if len(key) <= 12 || !found {
		return strings.Repeat("*", min(len(key), 8))
	}
	if i := strings.Index(key[len(prefix)+1:], "_"); i >= 0 {
		prefix = key[:len(prefix)+1+i]
	}
	return prefix + "_" + strings.Repeat("*", 8) + key[len(key)-4:]
}

// parseForm returns a POST's form body or a GET's query parameters.
func parseForm(w http.ResponseWriter, r *http.Request) (url.Values, *apiError) {
	if r.Method != http.MethodPost {
		return r.URL.Query(), nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		return nil, invalidRequest("", "", "Invalid request body: %v", err)
	}
	return r.PostForm, nil
}

// write sends resp.
func write(w http.ResponseWriter, resp response) outcome {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-store")
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body) // the client may be gone; nothing to do about it
	return outcome{status: resp.status}
}
