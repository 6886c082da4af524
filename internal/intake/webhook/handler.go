package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// Paths served by Handler.
const (
	StripePath   = "/webhooks/stripe"
	SendGridPath = "/webhooks/sendgrid"
)

// Inbox consumers of provider events.
const (
	ConsumerStripe   = "stripe-events"
	ConsumerSendGrid = "sendgrid-events"
)

// Defaults of Config.
const (
	// DefaultTolerance is how old a signed timestamp may be: Stripe's own
	// default (webhook.DefaultTolerance), used for SendGrid too.
	DefaultTolerance = 300 * time.Second
	// DefaultStripeMaxBody caps a Stripe event: one event is a few KiB.
	DefaultStripeMaxBody = 64 << 10
	// DefaultSendGridMaxBody caps a SendGrid batch, which holds many events.
	DefaultSendGridMaxBody = 1 << 20
)

// Config configures the Handler. Zero fields take the defaults noted.
type Config struct {
	// StripeSecrets are the endpoint signing secrets (whsec_…), any of
	// which is accepted, so a rotation lists both. Empty: the Stripe route
	// answers 404.
	StripeSecrets []string
	// StripeTolerance is the largest accepted age of Stripe-Signature's
	// timestamp. Default DefaultTolerance.
	StripeTolerance time.Duration
	// StripeMaxBody caps the body. Default DefaultStripeMaxBody.
	StripeMaxBody int64
	// SendGridPublicKey is the Event Webhook's verification key, base64 of
	// the DER public key, as SendGrid's settings page shows it. Empty: the
	// SendGrid route answers 404.
	SendGridPublicKey string
	// SendGridTolerance is the largest accepted difference between the
	// signed timestamp and now. Default DefaultTolerance.
	SendGridTolerance time.Duration
	// SendGridMaxBody caps a batch. Default DefaultSendGridMaxBody.
	SendGridMaxBody int64
	// Logger receives one line per refused or failed request. Default: none.
	Logger *slog.Logger
	// Now is the clock for SendGrid's timestamp. Default time.Now.
	Now func() time.Time
	// Namespace is the key namespace: an event about an object made under
	// another one (a shared Stripe or SendGrid account) is acknowledged and
	// ignored (docs/webhooks.md). Empty by default.
	Namespace string
}

// Enabled reports whether any route is on.
func (c Config) Enabled() bool { return len(c.StripeSecrets) > 0 || c.SendGridPublicKey != "" }

func (c *Config) setDefaults() {
	if c.StripeTolerance == 0 {
		c.StripeTolerance = DefaultTolerance
	}
	if c.SendGridTolerance == 0 {
		c.SendGridTolerance = DefaultTolerance
	}
	if c.StripeMaxBody == 0 {
		c.StripeMaxBody = DefaultStripeMaxBody
	}
	if c.SendGridMaxBody == 0 {
		c.SendGridMaxBody = DefaultSendGridMaxBody
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Signaler signals a workflow; client.Client is one.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// Handler serves both webhook routes. Build it with New.
type Handler struct {
	store   *store.Store
	signal  Signaler
	metrics *Metrics
	cfg     Config
	sgKey   *ecdsa.PublicKey
	mux     *http.ServeMux
}

// New returns the Handler. sig may be nil only when no Stripe secret is
// set; m may be nil (nothing counted).
func New(st *store.Store, sig Signaler, m *Metrics, cfg Config) (*Handler, error) {
	cfg.setDefaults()
	if st == nil {
		return nil, errors.New("webhook: a store is required")
	}
	for i, s := range cfg.StripeSecrets {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("webhook: Stripe secret %d is empty", i+1)
		}
	}
	if len(cfg.StripeSecrets) > 0 && sig == nil {
		return nil, errors.New("webhook: a signaler is required for Stripe events")
	}
	if cfg.StripeTolerance < 0 || cfg.SendGridTolerance < 0 || cfg.StripeMaxBody < 0 || cfg.SendGridMaxBody < 0 {
		return nil, errors.New("webhook: tolerances and body caps must not be negative")
	}
	if err := identity.ValidateNamespace(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("webhook: Namespace (EFFECTIVELY_KEY_NAMESPACE): %w", err)
	}
	h := &Handler{store: st, signal: sig, metrics: m, cfg: cfg, mux: http.NewServeMux()}
	if cfg.SendGridPublicKey != "" {
		key, err := sendGridKey(cfg.SendGridPublicKey)
		if err != nil {
			return nil, fmt.Errorf("webhook: SendGrid public key is not a base64 DER ECDSA key: %w", err)
		}
		h.sgKey = key
		h.mux.HandleFunc("POST "+SendGridPath, h.serveSendGrid)
	}
	if len(cfg.StripeSecrets) > 0 {
		h.mux.HandleFunc("POST "+StripePath, h.serveStripe)
	}
	return h, nil
}

// ServeHTTP serves the routes that are configured.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// readBody reads the whole body, at most limit bytes. The result is "" or
// ResultTooLarge/ResultBadRequest.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, ResultTooLarge
		}
		return nil, ResultBadRequest
	}
	return body, ""
}

// refuse answers a request that fails verification or is unusable, counts
// it and logs why, never the body.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, provider, result, reason string) {
	status := http.StatusBadRequest
	switch result {
	case ResultTooLarge:
		status = http.StatusRequestEntityTooLarge
	case ResultBadSignature:
		status = http.StatusUnauthorized
	case ResultError:
		status = http.StatusServiceUnavailable
	}
	h.metrics.count(provider, result)
	level := slog.LevelWarn
	if result == ResultError {
		level = slog.LevelError
	}
	h.cfg.Logger.LogAttrs(r.Context(), level, "webhook request refused",
		slog.String("provider", provider), slog.String("result", result), slog.Int("status", status),
		slog.String("reason", reason), slog.String("remote", r.RemoteAddr), slog.Int64("content_length", r.ContentLength))
	http.Error(w, result, status)
}

// ignoreForeign answers 200 to a request whose every event belongs to
// another key namespace: nothing was recorded, and the provider must not
// retry it.
func (h *Handler) ignoreForeign(w http.ResponseWriter, r *http.Request, provider, reason string) {
	h.metrics.count(provider, ResultForeign)
	h.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "webhook event of another key namespace ignored",
		slog.String("provider", provider), slog.String("reason", reason))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"received":true}` + "\n"))
}

// accept answers 200 once what the request carried is committed.
func (h *Handler) accept(w http.ResponseWriter, provider string, anyNew bool) {
	result := ResultDuplicate
	if anyNew {
		result = ResultAccepted
	}
	h.metrics.count(provider, result)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"received":true}` + "\n"))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Validate checks cfg, naming the environment variable at fault.
func (c Config) Validate() error {
	var errs []error
	for i, s := range c.StripeSecrets {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("STRIPE_WEBHOOK_SECRETS: secret %d is empty", i+1))
		}
	}
	if c.StripeTolerance < 0 {
		errs = append(errs, fmt.Errorf("STRIPE_WEBHOOK_TOLERANCE=%s: must not be negative", c.StripeTolerance))
	}
	if c.SendGridTolerance < 0 {
		errs = append(errs, fmt.Errorf("SENDGRID_WEBHOOK_TOLERANCE=%s: must not be negative", c.SendGridTolerance))
	}
	if c.SendGridPublicKey != "" {
		if _, err := sendGridKey(c.SendGridPublicKey); err != nil {
			errs = append(errs, errors.New("SENDGRID_WEBHOOK_PUBLIC_KEY: not the base64 ECDSA public key SendGrid's Event Webhook settings show"))
		}
	}
	return errors.Join(errs...)
}

// sendGridKey reads the Event Webhook's verification key: base64 of a DER
// (PKIX) public key, which must be ECDSA. sendgrid-go's own reader panics
// on another kind of key (an unchecked type assertion).
func sendGridKey(b64 string) (*ecdsa.PublicKey, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, err
	}
	key, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ECDSA key", pub)
	}
	return key, nil
}
