package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Providers, the values of the provider label.
const (
	ProviderStripe   = "stripe"
	ProviderSendGrid = "sendgrid"
)

// Transport wraps base (http.DefaultTransport when nil) so that every
// request is timed in NameProviderDuration under provider, the operation
// (the method and the path with its IDs replaced by {id}, such as
// "POST /v1/payment_intents/{id}/confirm") and the status class. A request
// that got no answer (a timeout, a dropped connection) is class "error".
// A nil *Metrics returns base unchanged.
func (m *Metrics) Transport(provider string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if m == nil {
		return base
	}
	return &timedTransport{base: base, provider: provider, hist: m}
}

// InstrumentClient returns a copy of c (a new client when nil) whose
// transport is timed by Transport. The copy shares c's connection pool.
func (m *Metrics) InstrumentClient(provider string, c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	} else if t, ok := http.DefaultTransport.(*http.Transport); ok {
		out.Transport = t.Clone() // a connection pool of its own, as the clients make by default
	}
	out.Transport = m.Transport(provider, out.Transport)
	return &out
}

type timedTransport struct {
	base     http.RoundTripper
	provider string
	hist     *Metrics
}

func (t *timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.base.RoundTrip(r)
	class := "error"
	if err == nil {
		class = StatusClass(resp.StatusCode)
	}
	t.hist.providerDuration.WithLabelValues(t.provider, Operation(r.Method, r.URL.Path), class).Observe(time.Since(start).Seconds())
	return resp, err
}

// StatusClass is "2xx", "4xx", … for an HTTP status code.
func StatusClass(code int) string {
	if code < 100 || code > 599 {
		return "error"
	}
	return strconv.Itoa(code/100) + "xx"
}

// idPrefixes are the prefixes of Stripe object IDs that may appear in a path.
var idPrefixes = []string{"pi_", "ch_", "pm_", "cus_", "evt_", "re_", "in_", "seti_", "src_", "py_"}

// Operation names a request for the operation label: the method and the
// path, every segment that is an object ID (a known Stripe ID prefix, or any
// digit other than an API version such as v1) replaced by {id}, so that the
// label's values stay few and carry no identifiers.
func Operation(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range segs {
		if isID(s) {
			segs[i] = "{id}"
		}
	}
	return method + " /" + strings.Join(segs, "/")
}

func isID(s string) bool {
	for _, p := range idPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	if len(s) >= 2 && s[0] == 'v' && strings.Trim(s[1:], "0123456789") == "" {
		return false // an API version
	}
	return strings.ContainsAny(s, "0123456789@")
}
