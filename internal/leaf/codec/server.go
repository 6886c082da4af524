package codec

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"go.temporal.io/sdk/converter"

	"github.com/effectively/effectively/internal/leaf/listener"
)

// Environment variables read by LoadServerConfig.
const (
	// EnvServerAddr is the codec server's listen address; empty turns the
	// server off.
	EnvServerAddr = "EFFECTIVELY_CODEC_SERVER_ADDR"
	// EnvCORSOrigins lists, comma-separated, the origins of the Temporal UI
	// allowed to call the codec server from a browser.
	EnvCORSOrigins = "EFFECTIVELY_CODEC_CORS_ORIGINS"
	// EnvToken is the bearer token every codec request must carry.
	EnvToken = "EFFECTIVELY_CODEC_TOKEN"
)

// MinTokenLen is the shortest accepted bearer token: the token is the only
// thing between the network and every customer's decrypted data.
const MinTokenLen = 16

// MaxRequestBytes bounds a codec request's body. Temporal's own gRPC limit
// is 4 MiB per message; a UI page decodes a batch of payloads at once.
const MaxRequestBytes = 16 << 20

// DefaultCORSOrigins returns the origins allowed when EnvCORSOrigins is not
// set: the dev server's UI.
func DefaultCORSOrigins() []string {
	return []string{"http://localhost:8233", "http://127.0.0.1:8233"}
}

// ServerConfig configures the codec server.
type ServerConfig struct {
	// Addr is the listen address (EFFECTIVELY_CODEC_SERVER_ADDR), such as
	// "127.0.0.1:8234". Empty (the default) means no codec server. The
	// server speaks plain HTTP: keep it on loopback or put TLS in front.
	Addr string
	// Origins are the exact origins (scheme://host[:port]) whose pages may
	// call the server (EFFECTIVELY_CODEC_CORS_ORIGINS, comma-separated).
	// Default DefaultCORSOrigins().
	Origins []string
	// Token is the bearer token requests must carry (EFFECTIVELY_CODEC_TOKEN).
	// Required, at least MinTokenLen characters, when Addr is set.
	Token string
}

// Enabled reports whether the codec server should run.
func (c ServerConfig) Enabled() bool { return c.Addr != "" }

// String describes c with the token redacted.
func (c ServerConfig) String() string {
	tok := "unset"
	if c.Token != "" {
		tok = "[redacted]"
	}
	return fmt.Sprintf("codec.ServerConfig{Addr: %q, Origins: %q, Token: %s}", c.Addr, c.Origins, tok)
}

// LoadServerConfig reads the codec server's configuration through lookup
// (os.LookupEnv in main), applies the defaults and validates it. A config
// whose Addr is empty is valid and turns the server off.
func LoadServerConfig(lookup func(string) (string, bool)) (ServerConfig, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	cfg := ServerConfig{Addr: get(EnvServerAddr), Token: get(EnvToken)}
	if s := get(EnvCORSOrigins); s != "" {
		for o := range strings.SplitSeq(s, ",") {
			if o = strings.TrimSpace(o); o != "" {
				cfg.Origins = append(cfg.Origins, o)
			}
		}
	}
	if len(cfg.Origins) == 0 {
		cfg.Origins = DefaultCORSOrigins()
	}
	if err := cfg.validate(); err != nil {
		return ServerConfig{}, err
	}
	return cfg, nil
}

func (c ServerConfig) validate() error {
	if !c.Enabled() {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("codec: %s: %w", EnvServerAddr, err)
	}
	if err := checkToken(c.Token); err != nil {
		return fmt.Errorf("codec: %s: %w", EnvToken, err)
	}
	for _, o := range c.Origins {
		if err := checkOrigin(o); err != nil {
			return fmt.Errorf("codec: %s: %w", EnvCORSOrigins, err)
		}
	}
	return nil
}

func checkToken(token string) error {
	if token == "" {
		return errors.New("a bearer token is required when the codec server is on")
	}
	if len(token) < MinTokenLen {
		return fmt.Errorf("token is %d characters, want at least %d", len(token), MinTokenLen)
	}
	return nil
}

// checkOrigin accepts an exact origin as browsers send it in the Origin
// header: scheme and host, no path, no wildcard.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("origin %q is not scheme://host[:port]", o)
	}
	return nil
}

// NewServerHandler returns the codec server: the SDK's codec HTTP handler
// (POST …/encode and …/decode with a JSON body {"payloads": [...]}) behind
// CORS for origins and a bearer-token check.
//
// Every request but a CORS preflight must carry "Authorization: Bearer
// <token>"; the token is compared in constant time, and any other request
// is answered 401. Preflight OPTIONS requests from an allowed origin are
// answered without a token, as browsers send them without credentials;
// from any other origin they are refused with 403.
func NewServerHandler(codec converter.PayloadCodec, origins []string, token string) (http.Handler, error) {
	if codec == nil {
		return nil, errors.New("codec: server needs a codec")
	}
	if err := checkToken(token); err != nil {
		return nil, fmt.Errorf("codec: server: %w", err)
	}
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		if err := checkOrigin(o); err != nil {
			return nil, fmt.Errorf("codec: server: %w", err)
		}
		allowed[strings.TrimSuffix(o, "/")] = true
	}
	return &server{
		next:    converter.NewPayloadCodecHTTPHandler(codec),
		origins: allowed,
		token:   sha256.Sum256([]byte(token)),
	}, nil
}

type server struct {
	next    http.Handler
	origins map[string]bool
	// token is the token's digest: comparing digests takes the same time
	// whatever the length of the presented token.
	token [sha256.Size]byte
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	allowed := origin != "" && s.origins[origin]
	if allowed {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if r.Method == http.MethodOptions {
		if origin != "" && !allowed {
			http.Error(w, "origin not allowed", http.StatusForbidden)
			return
		}
		h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Namespace")
		h.Set("Access-Control-Max-Age", "600")
		h.Set("Allow", "POST, OPTIONS")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !s.authorized(r) {
		h.Set("WWW-Authenticate", `Bearer realm="effectively codec"`)
		http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		h.Set("Allow", "POST, OPTIONS")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	s.next.ServeHTTP(w, r)
}

func (s *server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// Serve runs the codec server h on addr until ctx is done, then shuts it
// down, giving requests in flight 5 seconds; one still open then is cut and
// logged, not returned. It returns an error if addr cannot be bound or the
// server fails; nil after a shutdown.
func Serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) error {
	ln, err := listener.Listen(ctx, "codec server", addr)
	if err != nil {
		return err
	}
	return serve(ctx, ln, h, logger)
}

func serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		logger.Warn("codec server speaks plain HTTP on a non-loopback address: put TLS in front of it", "addr", ln.Addr().String())
	}
	return listener.Serve(ctx, "codec server", ln, h, listener.Codec(), logger)
}
