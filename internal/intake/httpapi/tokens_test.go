package httpapi_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/effectively/effectively/internal/intake/httpapi"
)

func TestParseTokens(t *testing.T) {
	h := httpapi.HashToken("secret")
	set, err := httpapi.ParseTokens([]byte("# comment\n\ncheckout " + h + " order.placed,order.refund_requested\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(set) != 1 {
		t.Fatalf("tokens %v", set)
	}
	for _, tok := range set {
		if tok.Name != "checkout" || !tok.May("order.placed") || !tok.May("order.refund_requested") || tok.May("order.shipped") {
			t.Fatalf("token %+v", tok)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{"", "no token"},
		{"checkout secret order.placed", "sha256:"},
		{"checkout sha256:abcd order.placed", "sha256:"},
		{"checkout " + h, "fields"},
		{"a " + h + " order.placed\nb " + h + " order.placed", "twice"},
		{"a " + h + " order.placed\na " + httpapi.HashToken("other") + " order.placed", "used twice"},
		{"a " + h + " order.placed,", "empty message type"},
	} {
		_, err := httpapi.ParseTokens([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  httpapi.Config
		want string
	}{
		{httpapi.Config{Addr: "127.0.0.1:8083"}, "TokensFile"},
		{httpapi.Config{Addr: "127.0.0.1:8083", TokensFile: "f", TLSCertFile: "c"}, "both or neither"},
		{httpapi.Config{Addr: "127.0.0.1:8083", TokensFile: "f", ClientCAFile: "ca"}, "need TLS"},
		{httpapi.Config{Addr: "127.0.0.1:8083", TokensFile: "f", MaxWait: -1}, "MaxWait"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (httpapi.Config{}).Validate(); err != nil {
		t.Errorf("off: %v", err)
	}
}

func testCount(t *testing.T, c *prometheus.CounterVec, route, code string) float64 {
	t.Helper()
	return testutil.ToFloat64(c.WithLabelValues(route, code))
}
