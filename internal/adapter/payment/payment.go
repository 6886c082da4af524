package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Defaults applied by New.
const (
	// DefaultTimeout bounds each HTTP request when Config.Timeout is zero.
	DefaultTimeout = 20 * time.Second
	// DefaultMaxNetworkRetries is stripe-go's retry count when
	// Config.MaxNetworkRetries is zero.
	DefaultMaxNetworkRetries int64 = 2
	// NoNetworkRetries, as Config.MaxNetworkRetries, turns stripe-go's own
	// retries off.
	NoNetworkRetries int64 = -1
	// MaxNetworkRetriesLimit is the largest Config.MaxNetworkRetries
	// accepted.
	MaxNetworkRetriesLimit int64 = 10
	// MaxIdempotencyKeyLen is the longest idempotency key Stripe accepts.
	MaxIdempotencyKeyLen = 255
)

// ErrInvalidConfig is wrapped by the errors New returns for a bad Config.
var ErrInvalidConfig = errors.New("payment: invalid config")

// ErrNotFound is reported, through errors.Is, when FindByMessageID finds no
// PaymentIntent, and by Get's *Error when the PaymentIntent does not exist.
var ErrNotFound = errors.New("payment: not found")

// Config configures a Client.
type Config struct {
	// APIKey is the Stripe secret or restricted key, from the STRIPE_API_KEY
	// environment variable. Required; it must start with sk_ or rk_. It is
	// never logged.
	APIKey string
	// BaseURL is the API's address, from STRIPE_BASE_URL. Empty means real
	// Stripe (https://api.stripe.com); the simulator is reached with, for
	// example, http://127.0.0.1:12111.
	BaseURL string
	// Timeout bounds each HTTP request, each retry on its own. Zero means
	// DefaultTimeout. It replaces the Timeout of HTTPClient, if one is
	// given.
	Timeout time.Duration
	// MaxNetworkRetries is how often stripe-go retries a request itself,
	// under the same key. Zero means DefaultMaxNetworkRetries;
	// NoNetworkRetries (-1) turns them off.
	MaxNetworkRetries int64
	// HTTPClient is the HTTP client to use. It is copied, not modified. Nil
	// means a client with its own connection pool.
	HTTPClient *http.Client
	// Limit, when set, wraps the transport outermost (the shared rate
	// limit, ratelimit.Limiter.Transport): a request may wait there for its
	// turn, and Timeout then counts from when it is sent.
	Limit func(http.RoundTripper) http.RoundTripper
	// SendMargin is how long before its context's deadline a create, a
	// confirm or a refund is no longer sent (deadline.Check): it fails with
	// a *deadline.TooLateError instead, and nothing reaches Stripe. Zero
	// means deadline.DefaultMargin; negative, none.
	SendMargin time.Duration
	// Logger receives stripe-go's log lines: requests and retries at debug
	// level, warnings and errors at their own. Response bodies are never
	// logged. Nil discards everything.
	Logger *slog.Logger
	// Namespace scopes every key the Client sends ("eu/payment:evt_1"),
	// tags what it creates, and limits its lookups to its own (doc.go, "Key
	// namespace"). Empty by default: keys are sent as given.
	Namespace string
}

// MetadataNamespace is the metadata key that carries Config.Namespace on
// the PaymentIntents and Refunds a Client creates with a namespace.
const MetadataNamespace = "effectively_namespace"

// MetadataTestPaymentMethod is the metadata key that keeps the test
// payment method a request named (pm_card_visa and the other pm_card_
// aliases). Stripe resolves such an alias into a new PaymentMethod (pm_1…)
// on the PaymentIntent, so a lookup can only compare the alias with what
// the request asked for through this key. A real PaymentMethod ID is kept
// as it is by Stripe and is compared directly; it is not copied here.
const MetadataTestPaymentMethod = "effectively_test_payment_method"

// IsTestPaymentMethod reports whether pm is one of Stripe's test
// payment-method aliases (pm_card_visa, pm_card_chargeDeclined, …), which
// Stripe replaces by a new PaymentMethod ID on the PaymentIntent. They exist
// only in test mode.
func IsTestPaymentMethod(pm string) bool {
	return strings.HasPrefix(pm, "pm_card_")
}

// addRequestMetadata sets the metadata every PaymentIntent of req carries.
func addRequestMetadata(params *stripe.PaymentIntentParams, req ChargeRequest, ns string) {
	params.AddMetadata("message_id", req.MessageID)
	if req.OrderID != 0 {
		params.AddMetadata("order_id", strconv.FormatInt(req.OrderID, 10))
	}
	if ns != "" {
		params.AddMetadata(MetadataNamespace, ns)
	}
	if IsTestPaymentMethod(req.PaymentMethod) {
		params.AddMetadata(MetadataTestPaymentMethod, req.PaymentMethod)
	}
}

// String describes c with the API key redacted.
func (c Config) String() string {
	return fmt.Sprintf("payment.Config{APIKey:%s BaseURL:%q Timeout:%s MaxNetworkRetries:%d Namespace:%q}",
		redactKey(c.APIKey), c.BaseURL, c.Timeout, c.MaxNetworkRetries, c.Namespace)
}

// GoString describes c for %#v with the API key redacted.
func (c Config) GoString() string { return c.String() }

// LogValue describes c for slog with the API key redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("api_key", redactKey(c.APIKey)),
		slog.String("base_url", c.BaseURL),
		slog.Duration("timeout", c.Timeout),
		slog.Int64("max_network_retries", c.MaxNetworkRetries),
		slog.String("namespace", c.Namespace),
	)
}

// redactKey keeps only a key's kind: "sk_test_[REDACTED]".
func redactKey(key string) string {
	switch {
	case key == "":
		return `""`
	case strings.HasPrefix(key, "sk_test_"), strings.HasPrefix(key, "sk_live_"),
		strings.HasPrefix(key, "rk_test_"), strings.HasPrefix(key, "rk_live_"):
		return key[:8] + "[REDACTED]"
	}
	return "[REDACTED]"
}

func (c Config) validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.APIKey == "":
		return invalid("APIKey is required (set STRIPE_API_KEY)")
	case strings.TrimSpace(c.APIKey) != c.APIKey || strings.ContainsAny(c.APIKey, " \t\r\n"):
		return invalid("APIKey contains white space")
	case !strings.HasPrefix(c.APIKey, "sk_") && !strings.HasPrefix(c.APIKey, "rk_"):
		return invalid("APIKey must be a secret (sk_) or restricted (rk_) key")
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		switch {
		case err != nil:
			return invalid("BaseURL is not a URL")
		case u.Scheme != "http" && u.Scheme != "https":
			return invalid("BaseURL must be an http or https URL")
		case u.Host == "":
			return invalid("BaseURL has no host")
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			return invalid("BaseURL must not carry user info, a query or a fragment")
		}
	}
	if c.Timeout < 0 {
		return invalid("Timeout is negative")
	}
	if c.MaxNetworkRetries < NoNetworkRetries || c.MaxNetworkRetries > MaxNetworkRetriesLimit {
		return invalid("MaxNetworkRetries must be between %d and %d", NoNetworkRetries, MaxNetworkRetriesLimit)
	}
	if err := identity.ValidateNamespace(c.Namespace); err != nil {
		return invalid("Namespace (EFFECTIVELY_KEY_NAMESPACE): %v", err)
	}
	return nil
}

// Client charges cards through Stripe. It is safe for concurrent use.
type Client struct {
	api       *client.API
	apiKey    string // only to scrub it from error messages
	namespace string // Config.Namespace
	// sendMargin is Config.SendMargin.
	sendMargin time.Duration
}

// late refuses a request that acts (what: "create", "confirm pi_…") when
// ctx's deadline is nearer than the send margin: an *Error of
// ClassTransient wrapping a *deadline.TooLateError, nothing sent.
func (c *Client) late(ctx context.Context, what string) error {
	if err := deadline.Check(ctx, "stripe "+what, c.sendMargin); err != nil {
		return &Error{Class: ClassTransient, Message: err.Error(), Err: err}
	}
	return nil
}

// New returns a Client configured by cfg, or an error wrapping
// ErrInvalidConfig that names the bad field. The Client has its own stripe-go
// backend: it neither reads nor changes stripe-go's package-level state.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	retries := cfg.MaxNetworkRetries
	switch retries {
	case 0:
		retries = DefaultMaxNetworkRetries
	case NoNetworkRetries:
		retries = 0
	}
	baseURL := cfg.BaseURL
	if baseURL == "" {
		baseURL = stripe.APIURL
	}

	var httpClient http.Client
	if cfg.HTTPClient != nil {
		httpClient = *cfg.HTTPClient
	} else if t, ok := http.DefaultTransport.(*http.Transport); ok {
		httpClient.Transport = t.Clone()
	}
	httpClient.Timeout = timeout
	// Each request is a span of the activity's trace (internal/leaf/tracing).
	httpClient.Transport = tracing.HTTPTransport("stripe", httpClient.Transport)
	if cfg.Limit != nil {
		// The wait for the rate limit is not the request's: its timeout
		// starts when it is sent.
		httpClient.Transport = cfg.Limit(deadline.Transport(httpClient.Transport, timeout, nil))
		httpClient.Timeout = 0
	}

	// GetBackendWithConfig fills in and keeps the config it is given, so
	// each Client builds its own.
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(baseURL),
		HTTPClient:        &httpClient,
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     newLeveledLogger(cfg.Logger, cfg.APIKey),
		EnableTelemetry:   stripe.Bool(false),
	})
	api := &client.API{}
	api.Init(cfg.APIKey, &stripe.Backends{API: backend})
	return &Client{api: api, apiKey: cfg.APIKey, namespace: cfg.Namespace, sendMargin: cfg.SendMargin}, nil
}

// ChargeRequest describes one charge.
type ChargeRequest struct {
	// IdempotencyKey is sent as the Idempotency-Key header. Required, at
	// most MaxIdempotencyKeyLen characters, without surrounding white space.
	// Use the same key for every attempt at the same charge.
	IdempotencyKey string
	// MessageID is stored as metadata[message_id]; FindByMessageID searches
	// for it. Required.
	MessageID string
	// OrderID is stored as metadata[order_id] unless it is zero.
	OrderID int64
	// Amount is in the currency's smallest unit, e.g. cents.
	Amount int64
	// Currency is an ISO 4217 code; it is sent in lower case.
	Currency string
	// PaymentMethod is the PaymentMethod to charge, e.g. pm_card_visa.
	PaymentMethod string
	// CustomerRef, if set, becomes the PaymentIntent's description.
	CustomerRef string
}

func (r ChargeRequest) validate() error {
	switch {
	case r.IdempotencyKey == "":
		return localError("IdempotencyKey is required: without one stripe-go sends a random key and a retry would charge again")
	case strings.TrimSpace(r.IdempotencyKey) != r.IdempotencyKey:
		return localError("IdempotencyKey has surrounding white space")
	case len(r.IdempotencyKey) > MaxIdempotencyKeyLen:
		return localError(fmt.Sprintf("IdempotencyKey is %d characters long; Stripe accepts at most %d",
			len(r.IdempotencyKey), MaxIdempotencyKeyLen))
	case r.MessageID == "":
		return localError("MessageID is required")
	}
	return nil
}

// Charge is the outcome of a PaymentIntent.
type Charge struct {
	// PaymentIntentID is the PaymentIntent's ID, pi_...
	PaymentIntentID string
	// Status is the PaymentIntent's status; "succeeded" means the card was
	// charged.
	Status string
	// Amount is the PaymentIntent's amount.
	Amount int64
	// Currency is the PaymentIntent's currency.
	Currency string
	// ChargeID is the latest charge's ID, ch_..., if there is one.
	ChargeID string
	// Replayed reports that Stripe answered from its idempotency layer
	// (Idempotent-Replayed: true): an earlier attempt with the same key
	// already did the work.
	Replayed bool
	// MessageID is the PaymentIntent's metadata[message_id].
	MessageID string
	// Namespace is the PaymentIntent's metadata[effectively_namespace]:
	// the key namespace of the Client that created it, "" for none.
	Namespace string
	// PaymentMethod is the PaymentIntent's payment method ID, empty when it
	// has none (Stripe detaches it from a declined PaymentIntent).
	PaymentMethod string
	// RequestedTestPaymentMethod is the test alias (pm_card_…) the request
	// named, from metadata[effectively_test_payment_method]; Stripe shows a
	// new PaymentMethod ID in PaymentMethod instead. Empty otherwise.
	RequestedTestPaymentMethod string
	// FailureCode and DeclineCode come from the PaymentIntent's
	// last_payment_error: why its last confirmation failed.
	FailureCode string
	DeclineCode string
	// CancellationReason is a canceled PaymentIntent's
	// cancellation_reason.
	CancellationReason string
}

// Failed reports whether the PaymentIntent's confirmation was refused (see
// Verdict).
func (c *Charge) Failed() bool {
	v, _, _ := c.Verdict()
	return v == VerdictFailed
}

// StatusSucceeded is the Status of a charged PaymentIntent.
const StatusSucceeded = string(stripe.PaymentIntentStatusSucceeded)

// Succeeded reports whether the card was charged.
func (c *Charge) Succeeded() bool { return c.Status == StatusSucceeded }

// Charge creates and confirms a PaymentIntent for req under
// req.IdempotencyKey. It returns the PaymentIntent when Stripe answers with
// success, whatever its Status (check Succeeded), and otherwise an error
// wrapping an *Error. The product charges with Create and Confirm instead;
// Charge serves the lab's single-request reference.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (*Charge, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("payment: charge: %w", err)
	}
	key, err := c.scope(req.IdempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("payment: charge: %w", err)
	}
	if err := c.late(ctx, "charge"); err != nil {
		return nil, fmt.Errorf("payment: charge message %s: %w", req.MessageID, err)
	}
	params := chargeParams(req, c.namespace)
	params.SetIdempotencyKey(key)
	// A resend stripe-go makes is never taken as unsent (deadline.Refusal).
	params.Context = deadline.TrackSends(ctx)
	pi, err := c.api.PaymentIntents.New(params)
	if err != nil {
		return nil, fmt.Errorf("payment: charge message %s: %w", req.MessageID, c.newError(err))
	}
	return toCharge(pi), nil
}

// chargeParams builds the PaymentIntent parameters for req under the key
// namespace ns, without the idempotency key (Charge sets the scoped one).
// They depend on req and ns alone, so every attempt sends the same request.
func chargeParams(req ChargeRequest, ns string) *stripe.PaymentIntentParams {
	params := &stripe.PaymentIntentParams{
		Amount:             stripe.Int64(req.Amount),
		Currency:           stripe.String(strings.ToLower(req.Currency)),
		PaymentMethod:      stripe.String(req.PaymentMethod),
		PaymentMethodTypes: stripe.StringSlice([]string{"card"}),
		Confirm:            stripe.Bool(true),
		OffSession:         stripe.Bool(true),
	}
	addRequestMetadata(params, req, ns)
	if req.CustomerRef != "" {
		params.Description = stripe.String(req.CustomerRef)
	}
	return params
}

// scope returns the Idempotency-Key sent for key: key scoped by the
// Client's namespace (identity.Scope), key itself without one.
func (c *Client) scope(key string) (string, error) {
	scoped, err := identity.Scope(c.namespace, key)
	if err != nil {
		return "", localError("IdempotencyKey cannot be scoped by the key namespace: " + err.Error())
	}
	return scoped, nil
}

// ours reports whether metadata names the Client's key namespace: the same
// namespace, or none on either side. An object of another deployment that
// shares the Stripe account is never ours, even for the same message ID.
func (c *Client) ours(metadata map[string]string) bool {
	return metadata[MetadataNamespace] == c.namespace
}

// Get retrieves a PaymentIntent by ID. A PaymentIntent that does not exist
// yields an error for which errors.Is(err, ErrNotFound) holds.
func (c *Client) Get(ctx context.Context, paymentIntentID string) (*Charge, error) {
	if paymentIntentID == "" {
		return nil, fmt.Errorf("payment: get: %w", localError("payment intent ID is required"))
	}
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	pi, err := c.api.PaymentIntents.Get(paymentIntentID, params)
	if err != nil {
		return nil, fmt.Errorf("payment: get %s: %w", paymentIntentID, c.newError(err))
	}
	return toCharge(pi), nil
}

// maxSearchResults bounds how many PaymentIntents FindByMessageID examines.
const maxSearchResults = 100

// FindByMessageID searches for the PaymentIntent created for a message. If
// there are several it returns a succeeded one, else a processing one, else
// the newest. It returns an error wrapping ErrNotFound when there is none;
// Search lags (see the package documentation), so the product calls it only
// through FindInWindow, for what is older than SearchLag.
func (c *Client) FindByMessageID(ctx context.Context, messageID string) (*Charge, error) {
	if messageID == "" {
		return nil, fmt.Errorf("payment: find: %w", localError("message ID is required"))
	}
	params := &stripe.PaymentIntentSearchParams{}
	params.Context = ctx
	params.Query = "metadata['message_id']:'" + quoteSearchValue(messageID) + "'"
	if c.namespace != "" {
		params.Query += " AND metadata['" + MetadataNamespace + "']:'" + quoteSearchValue(c.namespace) + "'"
	}
	params.Limit = stripe.Int64(maxSearchResults)

	var best *stripe.PaymentIntent
	it := c.api.PaymentIntents.Search(params)
	for n := 0; n < maxSearchResults && it.Next(); n++ {
		pi := it.PaymentIntent()
		if pi.Metadata["message_id"] != messageID || !c.ours(pi.Metadata) {
			continue // only exact matches, of this namespace, count
		}
		if best == nil || better(pi, best) {
			best = pi
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("payment: find message %s: %w", messageID, c.newError(err))
	}
	if best == nil {
		return nil, fmt.Errorf("payment: no payment intent for message %s: %w", messageID, ErrNotFound)
	}
	return toCharge(best), nil
}

// better reports whether a is a better answer than b for FindByMessageID.
func better(a, b *stripe.PaymentIntent) bool {
	if ra, rb := statusRank(a.Status), statusRank(b.Status); ra != rb {
		return ra > rb
	}
	return a.Created > b.Created
}

func statusRank(s stripe.PaymentIntentStatus) int {
	switch s {
	case stripe.PaymentIntentStatusSucceeded:
		return 2
	case stripe.PaymentIntentStatusProcessing:
		return 1
	default:
		return 0
	}
}

// quoteSearchValue escapes s for a single-quoted value in Stripe's search
// query language.
func quoteSearchValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

func toCharge(pi *stripe.PaymentIntent) *Charge {
	ch := &Charge{
		PaymentIntentID: pi.ID,
		Status:          string(pi.Status),
		Amount:          pi.Amount,
		Currency:        string(pi.Currency),
		MessageID:       pi.Metadata["message_id"],
		Namespace:       pi.Metadata[MetadataNamespace],

		RequestedTestPaymentMethod: pi.Metadata[MetadataTestPaymentMethod],

		CancellationReason: string(pi.CancellationReason),
	}
	if pi.LatestCharge != nil {
		ch.ChargeID = pi.LatestCharge.ID
	}
	if pi.PaymentMethod != nil {
		ch.PaymentMethod = pi.PaymentMethod.ID
	}
	if e := pi.LastPaymentError; e != nil {
		ch.FailureCode, ch.DeclineCode = string(e.Code), string(e.DeclineCode)
	}
	if pi.LastResponse != nil {
		ch.Replayed = pi.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return ch
}
