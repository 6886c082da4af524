package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// Source is the inbox's and the quarantine's source of a message that came
// through the API.
const Source = "http"

// Defaults of Config.
const (
	DefaultTokenRate = 100
	DefaultMaxWait   = 30 * time.Second
	// startTimeout bounds the workflow start after the commit: with
	// Temporal unreachable the answer is still 202, and the dispatcher
	// starts the recorded row once Temporal answers.
	startTimeout = 3 * time.Second
)

// recordTimeout bounds the inbox commit and the start of one request (past
// it the answer is 503 and the client retries with the same key), and the
// outcome's read after a wait. A variable for the tests.
var recordTimeout = 10 * time.Second

// Config configures the API.
type Config struct {
	// Addr is the listen address (EFFECTIVELY_API_ADDR); "" is off.
	Addr string
	// TokensFile lists the bearer tokens as SHA-256 hashes, each with the
	// message types it may submit (EFFECTIVELY_API_TOKENS_FILE); required.
	TokensFile string
	// TLSCertFile and TLSKeyFile serve HTTPS; both or neither.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, when set, requires a client certificate it signed (mTLS).
	ClientCAFile string
	// TokenRate is each token's requests per second, bursts of twice as
	// many; beyond it 429. Default DefaultTokenRate.
	TokenRate float64
	// MaxWait caps Prefer: wait=N. Default DefaultMaxWait.
	MaxWait time.Duration
	// Logger receives one line per request (no body, no personal data).
	// Default slog.Default().
	Logger *slog.Logger
}

// Enabled reports whether the API listener runs.
func (c Config) Enabled() bool { return c.Addr != "" }

// Validate names the first setting that cannot work.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	if c.TokensFile == "" {
		errs = append(errs, errors.New("TokensFile: the API is closed without tokens: set a tokens file"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLSCertFile, TLSKeyFile: give both or neither"))
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("ClientCAFile: client certificates need TLS (TLSCertFile, TLSKeyFile)"))
	}
	if c.TokenRate < 0 || math.IsNaN(c.TokenRate) {
		errs = append(errs, fmt.Errorf("TokenRate: %v: must not be negative", c.TokenRate))
	}
	if c.MaxWait < 0 || c.MaxWait > 5*time.Minute {
		errs = append(errs, fmt.Errorf("MaxWait: %s: must be between 0 and 5m", c.MaxWait))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.TokenRate == 0 {
		c.TokenRate = DefaultTokenRate
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// API serves POST /v1/messages and GET /v1/messages/{consumer}/{id}.
type API struct {
	in      *intake.Intake
	st      *store.Store
	tc      client.Client
	tokens  *Tokens
	cfg     Config
	metrics *Metrics
	h       http.Handler

	mu       sync.Mutex
	inflight map[string]struct{}
	serving  atomic.Bool
	// stopping ends when Serve's context does: the waiters answer at
	// once (terminal false) instead of holding the shutdown.
	stopping    context.Context
	stopWaiters context.CancelFunc
}

// New builds the API on in (decode, inbox, start) and tc (waiting for a
// workflow's result). Its metrics go to reg (nil: not registered).
func New(in *intake.Intake, tc client.Client, reg prometheus.Registerer, cfg Config) (*API, error) {
	if in == nil || tc == nil {
		return nil, errors.New("httpapi: intake and temporal client are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tokens, err := LoadTokens(cfg.TokensFile, cfg.TokenRate, max(1, int(2*cfg.TokenRate)), cfg.Logger)
	if err != nil {
		return nil, err
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	a := &API{in: in, st: in.Store(), tc: tc, tokens: tokens, cfg: cfg, metrics: m, inflight: map[string]struct{}{}}
	a.stopping, a.stopWaiters = context.WithCancel(context.Background()) //nolint:gosec // called when Serve's context ends
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", a.post)
	mux.HandleFunc("GET /v1/messages/{consumer}/{id}", a.get)
	notAllowed := func(allow string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, newProblem(ProblemMethodNotAllowed, r, "use "+allow), 0)
		}
	}
	mux.HandleFunc("/v1/messages", notAllowed(http.MethodPost))
	mux.HandleFunc("/v1/messages/{consumer}/{id}", notAllowed(http.MethodGet))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(ProblemNotFound, r, "the API serves POST /v1/messages and GET /v1/messages/{consumer}/{id}"), 0)
	})
	a.h = a.observe(mux)
	return a, nil
}

// Handler returns the API's handler, with its metrics, logs and traces.
func (a *API) Handler() http.Handler { return a.h }

// Tokens returns the API's token set.
func (a *API) Tokens() *Tokens { return a.tokens }

// Accepted is the answer to POST /v1/messages: 202 for the first request,
// and the same, plus the outcome once recorded, for every retry.
type Accepted struct {
	MessageID  string `json:"message_id"`
	Consumer   string `json:"consumer"`
	WorkflowID string `json:"workflow_id"`
	// Decision is "started": the message is recorded and its workflow runs
	// once (started now, or by the dispatcher if Temporal was unreachable).
	Decision string `json:"decision"`
	// Location is where GET finds the message.
	Location string `json:"location"`
	// Outcome is the recorded outcome (paid, payment_failed, …) once there
	// is one.
	Outcome store.Outcome `json:"outcome,omitempty"`
	// Terminal, with Prefer: wait, says whether the workflow closed in time.
	Terminal *bool `json:"terminal,omitempty"`
}

// DecisionStarted is Accepted.Decision.
const DecisionStarted = "started"

// Location is the path of a message's GET.
func Location(consumer, id string) string {
	return "/v1/messages/" + url.PathEscape(consumer) + "/" + url.PathEscape(id)
}

func (a *API) post(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r)
	tok, ok := a.authorize(w, r)
	if !ok {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeProblem(w, newProblem(ProblemMissingKey, r, "send the message's id as Idempotency-Key"), 0)
		return
	}
	if err := identity.ValidateMessageID(key); err != nil {
		p := newProblem(ProblemMissingKey, r, "Idempotency-Key: "+err.Error())
		p.Field = "Idempotency-Key"
		writeProblem(w, p, 0)
		return
	}
	info.messageID = key
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, message.MaxSize))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, newProblem(ProblemTooLarge, r, fmt.Sprintf("a message is at most %d bytes", message.MaxSize)), 0)
		return
	case err != nil:
		p := newProblem(ProblemInvalidMessage, r, "reading the body: "+err.Error())
		p.Title = "The request body could not be read"
		writeProblem(w, p, 0)
		return
	}
	raw, typ, err := withID(body, key)
	if err != nil {
		p := newProblem(ProblemKeyMismatch, r, err.Error())
		p.Field, p.MessageID = "id", key
		writeProblem(w, p, 0)
		return
	}
	if typ != "" && !tok.May(typ) {
		writeProblem(w, newProblem(ProblemForbiddenType, r, fmt.Sprintf("token %s may not submit %q", tok.Name, typ)), 0)
		return
	}
	// The commit and the start run to their end even if the client goes
	// away: its retry then finds the message recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	defer cancel()
	m, err := a.in.Routes().Decode(raw)
	if err != nil {
		a.rejectInvalid(ctx, w, r, raw, key, err)
		return
	}
	if !tok.May(m.Type) {
		writeProblem(w, newProblem(ProblemForbiddenType, r, fmt.Sprintf("token %s may not submit %q", tok.Name, m.Type)), 0)
		return
	}
	release, ok := a.enter(m.Consumer, m.ID)
	if !ok {
		p := newProblem(ProblemInFlight, r, "retry once the first request has its answer")
		p.MessageID = m.ID
		writeProblem(w, p, 1)
		return
	}
	rec, err := a.in.RecordMessage(ctx, m, Source)
	if err != nil {
		release()
		a.unavailable(w, r, m.ID, err)
		return
	}
	failpoint.Hit(failpoint.APIAfterInsert)
	if rec.Status == intake.StatusInvalid {
		release()
		t := ProblemInvalidMessage
		if rec.Reason == store.ReasonPayloadMismatch {
			t = ProblemPayloadMismatch
		}
		p := newProblem(t, r, rec.Error)
		p.MessageID, p.QuarantineID, p.Code = m.ID, rec.QuarantineID, rec.Reason
		writeProblem(w, p, 0)
		return
	}
	if rec.Pending {
		// Recorded: a start that does not come soon is the dispatcher's.
		sctx, scancel := context.WithTimeout(ctx, startTimeout)
		_, err := a.in.Dispatch(sctx, m)
		scancel()
		if err != nil {
			// Recorded: the dispatcher starts it, so the answer stands.
			a.cfg.Logger.Warn("api: start failed, left to the dispatcher", "message_id", m.ID, "consumer", m.Consumer, "error", err.Error())
		}
	}
	release()
	res := Accepted{MessageID: m.ID, Consumer: m.Consumer, WorkflowID: rec.WorkflowID, Decision: DecisionStarted, Location: Location(m.Consumer, m.ID)}
	replay := !rec.New
	if d, ok := a.preferWait(r); ok {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(d/time.Second)))
		closed := a.wait(r.Context(), m.Consumer, m.ID, res.WorkflowID, d)
		res.Terminal = &closed
		replay = true // the outcome is read below
	}
	if replay {
		// A context of its own: a wait may have outlasted the record's.
		octx, ocancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
		o, err := a.st.OutcomeOf(octx, m.Consumer, m.ID)
		ocancel()
		if err == nil {
			res.Outcome = o
		} else if res.Terminal != nil && *res.Terminal {
			a.cfg.Logger.Warn("api: the closed workflow's outcome could not be read; the answer has none", "message_id", m.ID, "consumer", m.Consumer, "error", err.Error())
		}
	}
	if !rec.New {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", res.Location)
	writeJSON(w, http.StatusAccepted, res)
}

// rejectInvalid quarantines a message that does not decode and answers 400.
func (a *API) rejectInvalid(ctx context.Context, w http.ResponseWriter, r *http.Request, raw []byte, key string, cause error) {
	res, err := a.in.RejectInvalid(ctx, raw, Source, cause)
	if err != nil {
		a.unavailable(w, r, key, err)
		return
	}
	t := ProblemInvalidMessage
	p := Problem{}
	var me *message.Error
	if errors.As(cause, &me) {
		if me.Code == message.CodeUnknownType {
			t = ProblemUnknownType
		}
		p.Field, p.Code = me.Field, me.Code
	}
	pd := newProblem(t, r, cause.Error())
	pd.Field, pd.Code, pd.MessageID, pd.QuarantineID = p.Field, p.Code, key, res.QuarantineID
	writeProblem(w, pd, 0)
}

// unavailable answers 503: Postgres did not commit, so nothing is recorded
// (or, past recordTimeout, not known to be): the client retries with the
// same key.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, id string, err error) {
	a.cfg.Logger.Warn("api: inbox unavailable", "message_id", id, "error", err.Error())
	p := newProblem(ProblemUnavailable, r, "retry with the same Idempotency-Key")
	p.MessageID = id
	writeProblem(w, p, 2)
}

// enter marks (consumer, id) in flight; ok is false when it already is.
func (a *API) enter(consumer, id string) (release func(), ok bool) {
	k := consumer + "\x00" + id
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, busy := a.inflight[k]; busy {
		return nil, false
	}
	a.inflight[k] = struct{}{}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.inflight, k)
			a.mu.Unlock()
		})
	}, true
}

// authorize checks the bearer token and its rate; it answers the refusal
// itself and returns ok=false.
func (a *API) authorize(w http.ResponseWriter, r *http.Request) (Token, bool) {
	scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		writeProblem(w, newProblem(ProblemUnauthorized, r, "send Authorization: Bearer TOKEN"), 0)
		return Token{}, false
	}
	tok, lim, ok := a.tokens.Lookup(strings.TrimSpace(secret))
	if !ok {
		writeProblem(w, newProblem(ProblemUnauthorized, r, "the token is not in the tokens file"), 0)
		return Token{}, false
	}
	infoOf(r).token = tok.Name
	res := lim.Reserve()
	if d := res.Delay(); !res.OK() || d > 0 {
		res.Cancel()
		writeProblem(w, newProblem(ProblemRateLimited, r, fmt.Sprintf("token %s is limited to %g requests/s", tok.Name, a.cfg.TokenRate)), max(1, int(math.Ceil(d.Seconds()))))
		return Token{}, false
	}
	return tok, true
}

// withID returns body with key as its id: unchanged when it has an id
// equal to key, with "id" added when it has none. A body that is no JSON
// object is returned as is, for the decoder to name the problem. typ is the
// body's type, when it is a string.
func withID(body []byte, key string) (raw []byte, typ string, err error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body, "", nil
	}
	if v, ok := top["type"]; ok {
		_ = json.Unmarshal(v, &typ)
	}
	if v, ok := top["id"]; ok {
		var id string
		if json.Unmarshal(v, &id) == nil && id != key {
			return nil, typ, fmt.Errorf("the body's id %q is not the Idempotency-Key %q: they must be equal, or leave id out", clip(id), key)
		}
		return body, typ, nil
	}
	i := bytes.IndexByte(body, '{')
	q, _ := json.Marshal(key)
	sep := ","
	if rest := bytes.TrimLeft(body[i+1:], " \t\r\n"); len(rest) > 0 && rest[0] == '}' {
		sep = ""
	}
	raw = make([]byte, 0, len(body)+len(q)+6)
	raw = append(raw, body[:i+1]...)
	raw = append(raw, `"id":`...)
	raw = append(raw, q...)
	raw = append(raw, sep...)
	raw = append(raw, body[i+1:]...)
	return raw, typ, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// preferWait reads Prefer: wait=N (RFC 7240), capped at MaxWait.
func (a *API) preferWait(r *http.Request) (time.Duration, bool) {
	for _, h := range r.Header.Values("Prefer") {
		for _, pref := range strings.FieldsFunc(h, func(c rune) bool { return c == ',' || c == ';' }) {
			v, ok := strings.CutPrefix(strings.TrimSpace(pref), "wait=")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(strings.Trim(v, `"`))
			if err != nil || n < 0 {
				return 0, false
			}
			return min(time.Duration(n)*time.Second, a.cfg.MaxWait), true
		}
	}
	return 0, false
}
