package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/effectively/effectively/internal/leaf/codec"
)

// The opt-ins for the checks below.
const (
	// EnvPublicListeners names, comma-separated, the listeners (health,
	// webhook, codec) that may bind an address other than loopback; the
	// worker logs a warning naming each one (PublicListeners).
	EnvPublicListeners = "EFFECTIVELY_PUBLIC_LISTENERS"
	// EnvAllowPublicListeners=true lets all three bind beyond loopback.
	// The pprof listener stays loopback under either opt-in.
	EnvAllowPublicListeners = "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"
	// EnvAllowInsecureProviderURLs lets SENDGRID_BASE_URL use plain http to
	// a host other than loopback (the simulator in the compose stack).
	EnvAllowInsecureProviderURLs = "EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS"
)

// StripeAPIURL is Stripe's own API, the only base URL a live key may use.
const StripeAPIURL = "https://api.stripe.com"

// Names of the listeners in EFFECTIVELY_PUBLIC_LISTENERS.
const (
	ListenerHealth  = "health"
	ListenerWebhook = "webhook"
	ListenerCodec   = "codec"
	ListenerPprof   = "pprof"
	ListenerAPI     = "api"
)

// Listener is one of the worker's HTTP listeners.
type Listener struct {
	// Key is its name in EFFECTIVELY_PUBLIC_LISTENERS (ListenerHealth, …).
	Key string
	// Name says what it serves, e.g. "health and metrics listener".
	Name string
	// Variable is the environment variable that sets Addr.
	Variable string
	// Addr is the listen address, host:port.
	Addr string
}

// listeners returns the listeners the worker will open.
func (c Config) listeners() []Listener {
	var out []Listener
	if c.HealthAddr != "" {
		out = append(out, Listener{ListenerHealth, "health and metrics listener", "EFFECTIVELY_HEALTH_ADDR", c.HealthAddr})
	}
	if c.WebhookAddr != "" && c.Webhooks.Enabled() {
		out = append(out, Listener{ListenerWebhook, "webhook endpoint", "EFFECTIVELY_WEBHOOK_ADDR", c.WebhookAddr})
	}
	if c.CodecServer.Enabled() {
		out = append(out, Listener{ListenerCodec, "codec server", codec.EnvServerAddr, c.CodecServer.Addr})
	}
	if c.API.Enabled() {
		out = append(out, Listener{ListenerAPI, "HTTP intake", "EFFECTIVELY_API_ADDR", c.API.Addr})
	}
	if c.PprofAddr != "" {
		out = append(out, Listener{ListenerPprof, "pprof endpoint", "EFFECTIVELY_PPROF_ADDR", c.PprofAddr})
	}
	return out
}

// PublicListeners returns the listeners bound to an address other than
// loopback, which Validate accepts only when EFFECTIVELY_PUBLIC_LISTENERS
// names them or EFFECTIVELY_ALLOW_PUBLIC_LISTENERS=true: the worker logs a
// warning for each at start, so that an exposed /metrics or codec server is
// never silent.
func (c Config) PublicListeners() []Listener {
	var out []Listener
	for _, l := range c.listeners() {
		if !loopbackAddr(l.Addr) {
			out = append(out, l)
		}
	}
	return out
}

// validateListeners keeps the listeners on loopback unless the operator
// opts in for each (EnvPublicListeners) or for all (EnvAllowPublicListeners).
// pprof stays on loopback regardless: its profiles and command line reveal
// the process's internals and it has no authentication.
func (c Config) validateListeners() []error {
	var errs []error
	for _, name := range c.PublicListenerNames {
		if name != ListenerHealth && name != ListenerWebhook && name != ListenerCodec && name != ListenerAPI {
			errs = append(errs, fmt.Errorf("%s: %q is not one of %s, %s, %s, %s (pprof always stays on loopback)",
				EnvPublicListeners, name, ListenerHealth, ListenerWebhook, ListenerCodec, ListenerAPI))
		}
	}
	ports := map[string]Listener{} // by port: two listeners on one port
	for _, l := range c.listeners() {
		host, port, err := net.SplitHostPort(l.Addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not host:port: %w", l.Variable, l.Addr, err))
			continue
		}
		// One port, the same host or a wildcard on either side: only one
		// can bind, and the other would fail after the worker started.
		if o, ok := ports[port]; ok && port != "0" {
			if oh, _, _ := net.SplitHostPort(o.Addr); oh == host || wildcardHost(oh) || wildcardHost(host) {
				errs = append(errs, fmt.Errorf("%s=%q: the %s would share its address with the %s (%s=%q); give each listener a port of its own",
					l.Variable, l.Addr, l.Name, o.Name, o.Variable, o.Addr))
			}
		} else {
			ports[port] = l
		}
		switch {
		case loopbackAddr(l.Addr):
		case l.Key == ListenerPprof:
			errs = append(errs, fmt.Errorf("%s=%q: the pprof endpoint must bind to loopback (e.g. 127.0.0.1:6060), even with %s", l.Variable, l.Addr, EnvAllowPublicListeners))
		case !c.AllowPublicListeners && !slices.Contains(c.PublicListenerNames, l.Key):
			errs = append(errs, fmt.Errorf("%s=%q: the %s would listen beyond loopback; bind 127.0.0.1, or add %s to %s (or set %s=true)",
				l.Variable, l.Addr, l.Name, l.Key, EnvPublicListeners, EnvAllowPublicListeners))
		}
	}
	return errs
}

// validateProviderURLs keeps API keys off plain http. STRIPE_BASE_URL may
// use http to loopback, or to another host with a test key (the simulator
// in the compose stack); a live key goes only to Stripe itself.
// SENDGRID_BASE_URL, whose keys carry no test or live mark, may use http to
// loopback, or to another host with
// EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS=true.
func (c Config) validateProviderURLs() []error {
	var errs []error
	key := c.Stripe.APIKey
	live := strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
	test := strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "rk_test_")
	if live && c.Stripe.BaseURL != "" && strings.TrimSuffix(c.Stripe.BaseURL, "/") != StripeAPIURL {
		errs = append(errs, fmt.Errorf("STRIPE_BASE_URL=%q: a live STRIPE_API_KEY goes only to %s; unset STRIPE_BASE_URL or use a test key", redactURL(c.Stripe.BaseURL), StripeAPIURL))
	} else if err := checkProviderURL("STRIPE_BASE_URL", c.Stripe.BaseURL, test, "a test STRIPE_API_KEY (sk_test_… or rk_test_…)"); err != nil {
		errs = append(errs, err)
	}
	if err := checkProviderURL("SENDGRID_BASE_URL", c.Email.BaseURL, c.AllowInsecureProviderURLs, EnvAllowInsecureProviderURLs+"=true"); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkProviderURL accepts an empty URL (the provider itself), https, and
// http to loopback, or to any host when insecureOK; needs says what would
// allow it.
func checkProviderURL(name, raw string, insecureOK bool, needs string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s=%q: not a URL such as https://host", name, redactURL(raw))
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme != "http":
		return fmt.Errorf("%s=%q: the scheme must be https", name, redactURL(raw))
	case loopbackHost(u.Hostname()) || insecureOK:
		return nil
	}
	return fmt.Errorf("%s=%q: plain http sends the API key in the clear; use https, a loopback host, or %s", name, redactURL(raw), needs)
}

// loopbackAddr reports whether a listen address binds loopback only. An
// empty host (":8081") binds every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackHost(host)
}

// loopbackHost reports whether host is localhost or a loopback IP
// (127.0.0.0/8, ::1).
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// wildcardHost reports whether host binds every interface ("", 0.0.0.0, ::).
func wildcardHost(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}
