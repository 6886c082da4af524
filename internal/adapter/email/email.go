// Package email sends effectively's transactional mail (receipts) through
// SendGrid's v3 Mail Send API, as a thin wrapper over the official client
// github.com/sendgrid/sendgrid-go.
//
// SendGrid has no idempotency key. Every mail therefore carries its own in
// custom_args, next to the ID of the message that caused it:
//
//	"custom_args": {"idempotency_key": "email:evt_1", "message_id": "evt_1"}
//
// A Client with a key namespace (Config.Namespace, EFFECTIVELY_KEY_NAMESPACE)
// adds it as custom_args.effectively_namespace, so that the event webhook of
// each deployment sharing the SendGrid account can tell its own mails from
// the others' with the same key (see internal/intake/webhook).
//
// The key shows in SendGrid's event webhook and activity feed, but SendGrid
// does not use it to deduplicate: a mail sent twice is delivered twice. Making
// the mail effectively-once is the caller's job (the effect ledger), and this
// package gives it what it needs to decide:
//
//   - Send returns SendGrid's X-Message-Id on acceptance (202).
//   - Every failure is either permanent (IsPermanent reports true: an invalid
//     mail or Config, or a 400 or 413 answer), where retrying cannot help, or
//     transient (429, 5xx, timeouts, transport errors, a canceled context),
//     where it may. A 401, 403, 404 or 3xx is about effectively's API key or
//     base URL, not the mail (IsConfiguration): transient, since it heals
//     once an operator fixes the configuration, and worth an alert.
//   - A transient failure does not prove that nothing was sent. When the
//     connection breaks or the timeout expires after SendGrid accepted the
//     mail, or SendGrid fails after accepting it, Send returns a transient
//     error for a mail that was delivered, and retrying it delivers it twice.
//     Only the caller's ledger policy can choose between that risk and not
//     retrying.
//
// Send never retries by itself, never follows redirects and bounds every
// request by Config.Timeout. It does not use sendgrid-go's package-level
// clients, which have no timeout, nor its MakeRequestRetry, which sleeps
// through 429s without honoring the context.
//
// The API key never appears in an error or a log.
package email

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sendgrid/rest"
	"github.com/sendgrid/sendgrid-go"
	sgmail "github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Defaults applied to a Config.
const (
	DefaultBaseURL = "https://api.sendgrid.com"
	DefaultFrom    = "receipts@effectively.local"
	DefaultTimeout = 10 * time.Second
)

// Limits on a Mail.
const (
	// MaxKeyLen is the longest idempotency key accepted.
	MaxKeyLen = 255
	// MaxMessageIDLen is the longest message ID accepted.
	MaxMessageIDLen = 255
	// MaxSubjectLen is the longest subject accepted, in bytes.
	MaxSubjectLen = 998
)

// maxMessageLen is how much of SendGrid's error message Error keeps, in
// runes.
const maxMessageLen = 300

const mailSendPath = "/v3/mail/send"

// Custom argument names.
const (
	argIdempotencyKey = "idempotency_key"
	argMessageID      = "message_id"
	// ArgNamespace carries Config.Namespace, when set.
	ArgNamespace = "effectively_namespace"
)

var (
	// ErrInvalidConfig is wrapped by the errors New returns for a bad Config.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrInvalidMail is wrapped by the errors Send returns for a bad Mail,
	// before anything is sent. Such errors are permanent.
	ErrInvalidMail = errors.New("invalid mail")
)

// Config configures a Client. The zero values of the optional fields select
// the defaults.
type Config struct {
	// APIKey is the SendGrid API key (SENDGRID_API_KEY). Required. It is
	// never logged and never appears in an error.
	APIKey string
	// BaseURL is the scheme and host of the API (SENDGRID_BASE_URL), e.g.
	// http://127.0.0.1:12112 for the simulator. Empty means DefaultBaseURL.
	BaseURL string
	// From is the sender address (EMAIL_FROM), a bare address such as
	// receipts@example.com. Empty means DefaultFrom.
	From string
	// FromName is the sender's display name. Optional.
	FromName string
	// Timeout bounds each request, from connecting to reading the answer.
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// SandboxMode asks SendGrid to validate mails without delivering them:
	// it answers 200 with no X-Message-Id.
	SandboxMode bool
	// Namespace is the key namespace, sent as
	// custom_args.effectively_namespace beside the ledger's unscoped key.
	// Empty by default: none sent.
	Namespace string
	// HTTPClient, when not nil, sends the requests. The Client uses a copy,
	// which does not follow redirects unless HTTPClient.CheckRedirect is set.
	// Nil means a dedicated client whose Timeout is Config.Timeout.
	HTTPClient *http.Client
	// Limit, when set, wraps the transport outermost (the shared rate
	// limit, ratelimit.Limiter.Transport): a request may wait there for its
	// turn, and Timeout then counts from when it is sent.
	Limit func(http.RoundTripper) http.RoundTripper
	// SendMargin is how long before its context's deadline a mail is no
	// longer sent (deadline.Check): Send fails with a
	// *deadline.TooLateError instead, and nothing reaches SendGrid. Zero
	// means deadline.DefaultMargin; negative, none.
	SendMargin time.Duration
}

// setDefaults fills in the optional fields left empty.
func (c *Config) setDefaults() {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.From == "" {
		c.From = DefaultFrom
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
}

// validate reports the first invalid field, by name and environment
// variable. It never includes the API key.
func (c *Config) validate() error {
	invalid := func(field, format string, args ...any) error {
		return fmt.Errorf("email: %w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.APIKey == "":
		return invalid("APIKey (SENDGRID_API_KEY)", "is required")
	case strings.ContainsFunc(c.APIKey, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return invalid("APIKey (SENDGRID_API_KEY)", "contains white space or control characters")
	}

	u, err := url.Parse(c.BaseURL)
	switch {
	case err != nil:
		return invalid("BaseURL (SENDGRID_BASE_URL)", "is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return invalid("BaseURL (SENDGRID_BASE_URL)", "scheme must be http or https, in %q", c.BaseURL)
	case u.Host == "":
		return invalid("BaseURL (SENDGRID_BASE_URL)", "has no host, in %q", c.BaseURL)
	case u.User != nil:
		return invalid("BaseURL (SENDGRID_BASE_URL)", "must not contain credentials")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(c.BaseURL, "#"):
		return invalid("BaseURL (SENDGRID_BASE_URL)", "must not have a query or fragment, in %q", c.BaseURL)
	}

	if err := ValidateAddress(c.From); err != nil {
		return invalid("From (EMAIL_FROM)", "%v", err)
	}
	if strings.ContainsFunc(c.FromName, unicode.IsControl) {
		return invalid("FromName", "contains control characters")
	}
	if c.Timeout < 0 {
		return invalid("Timeout", "is negative (%s)", c.Timeout)
	}
	if err := identity.ValidateNamespace(c.Namespace); err != nil {
		return invalid("Namespace (EFFECTIVELY_KEY_NAMESPACE)", "%v", err)
	}
	return nil
}

// Client sends mail through SendGrid. It is safe for concurrent use.
type Client struct {
	apiKey   string
	host     string // BaseURL without trailing slash
	from     *sgmail.Email
	timeout  time.Duration
	limited  bool          // Config.Limit: the transport times each request
	margin   time.Duration // Config.SendMargin
	sandbox  bool
	ns       string // Config.Namespace
	rest     *rest.Client
	redactor *strings.Replacer
}

// New returns a Client configured by cfg, after applying the defaults. It
// fails, naming the field, if cfg is invalid.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var hc *http.Client
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	} else {
		hc = &http.Client{Timeout: cfg.Timeout}
		if t, ok := http.DefaultTransport.(*http.Transport); ok {
			hc.Transport = t.Clone() // a connection pool of our own
		}
	}
	// Each request is a span of the activity's trace (internal/leaf/tracing).
	hc.Transport = tracing.HTTPTransport("sendgrid", hc.Transport)
	if cfg.Limit != nil {
		// The wait for the rate limit is not the request's: its timeout
		// starts when it is sent.
		hc.Transport = cfg.Limit(deadline.Transport(hc.Transport, cfg.Timeout, errTimeout))
		hc.Timeout = 0
	}
	if hc.CheckRedirect == nil {
		// A redirect would replay or, for 301 to 303, turn the POST into a
		// GET; either way it means BaseURL is wrong.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return &Client{
		apiKey:   cfg.APIKey,
		host:     strings.TrimRight(cfg.BaseURL, "/"),
		from:     sgmail.NewEmail(cfg.FromName, cfg.From),
		timeout:  cfg.Timeout,
		limited:  cfg.Limit != nil,
		margin:   cfg.SendMargin,
		sandbox:  cfg.SandboxMode,
		ns:       cfg.Namespace,
		rest:     &rest.Client{HTTPClient: hc},
		redactor: strings.NewReplacer(cfg.APIKey, "[redacted]"),
	}, nil
}

// Mail is one mail to send.
type Mail struct {
	// IdempotencyKey identifies the effect, e.g. "email:evt_1". Required. It
	// is sent as custom_args.idempotency_key; SendGrid does not deduplicate
	// on it.
	IdempotencyKey string
	// MessageID is the ID of the message that caused the mail, e.g. "evt_1",
	// sent as custom_args.message_id when not empty.
	MessageID string
	// To is the recipient, a bare address. Required.
	To string
	// Subject is the subject line. Required.
	Subject string
	// Text is the text/plain body. Text, HTML or both are required.
	Text string
	// HTML is the text/html body.
	HTML string
}

// validate reports the first invalid field of m.
func (m *Mail) validate() error {
	invalid := func(field, format string, args ...any) error {
		return fmt.Errorf("email: %w: %s: %s", ErrInvalidMail, field, fmt.Sprintf(format, args...))
	}
	switch {
	case m.IdempotencyKey == "":
		return invalid("IdempotencyKey", "is required")
	case len(m.IdempotencyKey) > MaxKeyLen:
		return invalid("IdempotencyKey", "is %d bytes, the limit is %d", len(m.IdempotencyKey), MaxKeyLen)
	case !printable(m.IdempotencyKey):
		return invalid("IdempotencyKey", "must be printable UTF-8 without control characters")
	case len(m.MessageID) > MaxMessageIDLen:
		return invalid("MessageID", "is %d bytes, the limit is %d", len(m.MessageID), MaxMessageIDLen)
	case !printable(m.MessageID):
		return invalid("MessageID", "must be printable UTF-8 without control characters")
	}
	if err := ValidateAddress(m.To); err != nil {
		return invalid("To", "%v", err)
	}
	switch {
	case strings.TrimSpace(m.Subject) == "":
		return invalid("Subject", "is required")
	case len(m.Subject) > MaxSubjectLen:
		return invalid("Subject", "is %d bytes, the limit is %d", len(m.Subject), MaxSubjectLen)
	case !printable(m.Subject):
		return invalid("Subject", "must be printable UTF-8 without control characters")
	case m.Text == "" && m.HTML == "":
		return invalid("Text", "Text or HTML is required")
	case !utf8.ValidString(m.Text):
		return invalid("Text", "is not valid UTF-8")
	case !utf8.ValidString(m.HTML):
		return invalid("HTML", "is not valid UTF-8")
	}
	return nil
}

func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// body returns the v3 Mail Send JSON body of m, built with sendgrid-go's
// helpers.
func (c *Client) body(m Mail) ([]byte, error) {
	var contents []*sgmail.Content
	// SendGrid requires text/plain before text/html.
	if m.Text != "" {
		contents = append(contents, sgmail.NewContent("text/plain", m.Text))
	}
	if m.HTML != "" {
		contents = append(contents, sgmail.NewContent("text/html", m.HTML))
	}
	msg := sgmail.NewV3MailInit(c.from, m.Subject, sgmail.NewEmail("", m.To), contents...)
	msg.SetCustomArg(argIdempotencyKey, m.IdempotencyKey)
	if m.MessageID != "" {
		msg.SetCustomArg(argMessageID, m.MessageID)
	}
	if c.ns != "" {
		msg.SetCustomArg(ArgNamespace, c.ns)
	}
	if c.sandbox {
		msg.SetMailSettings(sgmail.NewMailSettings().SetSandboxMode(sgmail.NewSetting(true)))
	}
	// Not sgmail.GetRequestBody: it logs marshaling errors and returns a
	// nil body.
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("email: encode mail %q: %w", m.IdempotencyKey, err)
	}
	return b, nil
}

// Send sends m once and returns SendGrid's X-Message-Id for it. In sandbox
// mode, SendGrid answers 200 without one, and Send returns "".
//
// Send makes a single request, bounded by ctx and Config.Timeout. A non-2xx
// answer is returned as an *Error. Any error may be tested with IsPermanent;
// see the package documentation for why a transient error does not mean that
// nothing was delivered.
func (c *Client) Send(ctx context.Context, m Mail) (providerMessageID string, err error) {
	if err := m.validate(); err != nil {
		return "", err
	}
	body, err := c.body(m)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("email: send %q: not sent: %w", m.IdempotencyKey, err)
	}
	if err := deadline.Check(ctx, fmt.Sprintf("sendgrid send %q", m.IdempotencyKey), c.margin); err != nil {
		return "", fmt.Errorf("email: %w", err)
	}

	req := sendgrid.GetRequest(c.apiKey, mailSendPath, c.host)
	req.Method = rest.Post
	req.Body = body
	// Never add an Idempotency-Key header: net/http would then consider the
	// POST replayable and resend it by itself after a broken keep-alive
	// connection.

	if !c.limited {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, errTimeout)
		defer cancel()
	}
	resp, err := c.rest.SendWithContext(ctx, req)
	if resp == nil {
		if err == nil {
			err = errors.New("no response")
		}
		return "", fmt.Errorf("email: send %q: %s: %w", m.IdempotencyKey, c.transportReason(ctx, err, errTimeout), c.redact(err))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// Accepted. A failure to read the (empty) body does not undo that.
		return http.Header(resp.Headers).Get("X-Message-Id"), nil
	}
	return "", c.providerError(m.IdempotencyKey, resp, err)
}

// transportReason describes a request that got no answer: whether it timed
// out, and whether the mail may have been delivered anyway.
func (c *Client) transportReason(ctx context.Context, err, errTimeout error) string {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return "could not resolve the host, the mail was not sent"
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return "could not connect, the mail was not sent"
	}
	ne, isNetErr := errors.AsType[net.Error](err)
	var reason string
	switch {
	case errors.Is(context.Cause(ctx), errTimeout) || errors.Is(err, errTimeout):
		reason = fmt.Sprintf("request timed out after %s", c.timeout)
	case ctx.Err() != nil:
		reason = "request aborted by the caller's context"
	case isNetErr && ne.Timeout():
		reason = "request timed out"
	default:
		reason = "request failed"
	}
	return reason + ", the mail may have been delivered"
}

// timeoutError is the cause of a request's context expiring after
// Config.Timeout. net/http returns it in place of context.DeadlineExceeded,
// which it unwraps to.
type timeoutError struct{}

// errTimeout is the cause of every request's timeout.
var errTimeout error = &timeoutError{}

func (*timeoutError) Error() string { return "email Config.Timeout exceeded" }
func (*timeoutError) Timeout() bool { return true }
func (*timeoutError) Unwrap() error { return context.DeadlineExceeded }

// providerError turns a non-2xx answer into an *Error. readErr is the error,
// if any, met while reading the body.
func (c *Client) providerError(key string, resp *rest.Response, readErr error) *Error {
	e := &Error{
		StatusCode:    resp.StatusCode,
		Permanent:     permanentStatus(resp.StatusCode),
		Configuration: configurationStatus(resp.StatusCode),
		key:           key,
	}
	if readErr != nil {
		e.Err = c.redact(readErr)
	}
	var body struct {
		Errors []struct {
			Message string  `json:"message"`
			Field   *string `json:"field"`
		} `json:"errors"`
	}
	if json.Unmarshal([]byte(resp.Body), &body) == nil && len(body.Errors) > 0 {
		e.Message = body.Errors[0].Message
		if f := body.Errors[0].Field; f != nil {
			e.Field = *f
		}
	} else {
		e.Message = strings.TrimSpace(resp.Body)
	}
	e.Message = truncate(clean(c.redactString(e.Message)), maxMessageLen)
	e.Field = truncate(clean(c.redactString(e.Field)), maxMessageLen)
	return e
}

// permanentStatus reports whether retrying a request answered status cannot
// help: a 4xx that is about the mail (400, 413, …), not 408, 429 or one of
// configurationStatus.
func permanentStatus(status int) bool {
	switch {
	case configurationStatus(status):
		return false
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return false
	case status >= 400 && status < 500:
		return true
	default:
		return false
	}
}

// configurationStatus reports whether status is about effectively's own
// configuration, not the mail: 401 and 403 (a wrong, revoked or rotated API
// key, a key without the mail.send scope), 404 and every 3xx (a wrong
// BaseURL: redirects are not followed). Retrying helps once an operator
// fixes it, so such an answer is never the mail's outcome.
func configurationStatus(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound ||
		status >= 300 && status < 400
}

func (c *Client) redactString(s string) string {
	return c.redactor.Replace(s)
}

// redact returns err with the API key removed from its message, keeping err
// in the chain for errors.Is and errors.As.
func (c *Client) redact(err error) error {
	msg := err.Error()
	if red := c.redactString(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// clean replaces control characters, so that a provider's answer cannot
// forge log lines.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// truncate shortens s to at most n runes, the last being "…" when s was
// longer.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// Error is SendGrid's non-2xx answer to a Mail Send request.
type Error struct {
	// StatusCode is the HTTP status answered.
	StatusCode int
	// Permanent reports whether retrying cannot help (see IsPermanent).
	Permanent bool
	// Configuration reports an answer about effectively's API key or base
	// URL rather than the mail (see IsConfiguration): not permanent.
	Configuration bool
	// Message is the first errors[].message of the answer, or the answer
	// itself when it is not SendGrid's JSON, truncated to 300 characters,
	// with the API key and control characters removed.
	Message string
	// Field is the first errors[].field, e.g.
	// "personalizations.0.to.0.email", when SendGrid names one.
	Field string
	// Err is the error met reading the answer, if any.
	Err error

	key string
}

// Error describes the answer, without the API key.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("email: ")
	if e.key != "" {
		fmt.Fprintf(&b, "send %q: ", e.key)
	}
	fmt.Fprintf(&b, "sendgrid answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %s)", e.Field)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (reading the answer: %v)", e.Err)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether err means that retrying the same send cannot
// succeed: an invalid Config or Mail, or SendGrid answering 400, 413 or
// another 4xx but 401, 403, 404, 408 and 429. Everything else — 3xx, 401,
// 403, 404 (IsConfiguration), 408, 429, 5xx, timeouts, transport errors, a
// canceled context, unknown errors — is transient. IsPermanent(nil) is
// false.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Permanent
	}
	return errors.Is(err, ErrInvalidMail) || errors.Is(err, ErrInvalidConfig)
}

// IsConfiguration reports whether err is SendGrid refusing effectively's
// configuration rather than the mail: 401, 403 (the API key), 404 or a
// redirect (the base URL). Retryable, and an operator must be told.
func IsConfiguration(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Configuration
}

// ValidateAddress reports whether addr is a bare e-mail address such as
// receipts@example.com, as SendGrid expects in "email" members: parsed by
// net/mail, without a display name, angle brackets or comments, without
// control characters, with a dotted domain and within the SMTP length limits.
func ValidateAddress(addr string) error {
	switch {
	case addr == "":
		return errors.New("address is empty")
	case strings.ContainsFunc(addr, unicode.IsControl):
		return fmt.Errorf("address %q contains control characters", addr)
	case len(addr) > 254:
		return fmt.Errorf("address is %d bytes, the limit is 254", len(addr))
	}
	a, err := mail.ParseAddress(addr)
	if err != nil {
		return fmt.Errorf("address %q is not valid: %w", addr, err)
	}
	if a.Name != "" || a.Address != addr {
		return fmt.Errorf("address %q is not a bare address like name@example.com", addr)
	}
	at := strings.LastIndexByte(addr, '@')
	local, domain := addr[:at], addr[at+1:]
	switch {
	case len(local) > 64:
		return fmt.Errorf("address %q has a local part of %d bytes, the limit is 64", addr, len(local))
	case strings.HasPrefix(domain, "["):
		return fmt.Errorf("address %q has an IP literal domain", addr)
	case !strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, "."):
		return fmt.Errorf("address %q has no dotted domain", addr)
	}
	return nil
}
