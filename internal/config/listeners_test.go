package config

import (
	"strings"
	"testing"
)

// base is a valid worker environment with every listener on its default.
func base(extra map[string]string) map[string]string {
	m := map[string]string{"STRIPE_API_KEY": "sk_test_x", "SENDGRID_API_KEY": "SG.x"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func validate(t *testing.T, vals map[string]string) (Config, error) {
	t.Helper()
	c, err := Load(env(vals))
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

const (
	codecKeys  = "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	codecToken = "tttttttttttttttt"
)

func TestListenersStayOnLoopback(t *testing.T) {
	codec := func(addr string, extra map[string]string) map[string]string {
		m := map[string]string{"EFFECTIVELY_CODEC_SERVER_ADDR": addr, "EFFECTIVELY_CODEC_KEYS": codecKeys, "EFFECTIVELY_CODEC_TOKEN": codecToken}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	webhook := func(addr string, extra map[string]string) map[string]string {
		m := map[string]string{"EFFECTIVELY_WEBHOOK_ADDR": addr, "STRIPE_WEBHOOK_SECRETS": "whsec_a"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	allow := map[string]string{EnvAllowPublicListeners: "true"}
	tests := map[string]struct {
		env map[string]string
		// refused names what the error must mention; empty: accepted.
		refused string
		// warned lists the variables PublicListeners must name.
		warned []string
	}{
		"defaults":                    {env: nil},
		"health 127.0.0.1":            {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "127.0.0.1:9081"}},
		"health 127.1.2.3":            {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "127.1.2.3:9081"}},
		"health [::1]":                {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "[::1]:9081"}},
		"health localhost":            {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "localhost:9081"}},
		"health off":                  {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "off"}},
		"health :port":                {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": ":8081"}, refused: "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"},
		"health 0.0.0.0":              {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "0.0.0.0:8081"}, refused: "EFFECTIVELY_HEALTH_ADDR"},
		"health [::]":                 {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "[::]:8081"}, refused: "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"},
		"health 10.0.0.5":             {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "10.0.0.5:8081"}, refused: "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"},
		"health hostname":             {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "worker.internal:8081"}, refused: "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"},
		"health no port":              {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "8081"}, refused: "EFFECTIVELY_HEALTH_ADDR"},
		"health :port, opted in":      {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": ":8081", EnvAllowPublicListeners: "true"}, warned: []string{"EFFECTIVELY_HEALTH_ADDR"}},
		"health hostname, opted in":   {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": "worker.internal:8081", EnvAllowPublicListeners: "true"}, warned: []string{"EFFECTIVELY_HEALTH_ADDR"}},
		"opt-in not a bool":           {env: map[string]string{EnvAllowPublicListeners: "yes please"}, refused: "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS"},
		"webhook loopback":            {env: webhook("127.0.0.1:8082", nil)},
		"webhook 0.0.0.0":             {env: webhook("0.0.0.0:8082", nil), refused: "EFFECTIVELY_WEBHOOK_ADDR"},
		"webhook 0.0.0.0, opted in":   {env: webhook("0.0.0.0:8082", allow), warned: []string{"EFFECTIVELY_WEBHOOK_ADDR"}},
		"webhook without secrets":     {env: map[string]string{"EFFECTIVELY_WEBHOOK_ADDR": "0.0.0.0:8082"}}, // no listener runs
		"codec loopback":              {env: codec("127.0.0.1:8234", nil)},
		"codec :port":                 {env: codec(":8234", nil), refused: "EFFECTIVELY_CODEC_SERVER_ADDR"},
		"codec 192.168.1.2, opted in": {env: codec("192.168.1.2:8234", allow), warned: []string{"EFFECTIVELY_CODEC_SERVER_ADDR"}},
		"pprof loopback":              {env: map[string]string{"EFFECTIVELY_PPROF_ADDR": "127.0.0.1:6060"}},
		"pprof :port":                 {env: map[string]string{"EFFECTIVELY_PPROF_ADDR": ":6060"}, refused: "EFFECTIVELY_PPROF_ADDR"},
		"pprof 0.0.0.0, opted in":     {env: map[string]string{"EFFECTIVELY_PPROF_ADDR": "0.0.0.0:6060", EnvAllowPublicListeners: "true"}, refused: "pprof endpoint must bind to loopback"},
		"health named":                {env: map[string]string{"EFFECTIVELY_HEALTH_ADDR": ":8081", EnvPublicListeners: "health"}, warned: []string{"EFFECTIVELY_HEALTH_ADDR"}},
		"health named, codec not":     {env: codec(":8234", map[string]string{"EFFECTIVELY_HEALTH_ADDR": ":8081", EnvPublicListeners: "health"}), refused: "add codec to EFFECTIVELY_PUBLIC_LISTENERS"},
		"health named, webhook not":   {env: webhook(":8082", map[string]string{EnvPublicListeners: "health"}), refused: "webhook endpoint would listen beyond loopback"},
		"codec and webhook named":     {env: codec(":8234", webhook(":8082", map[string]string{EnvPublicListeners: "webhook, codec"})), warned: []string{"EFFECTIVELY_WEBHOOK_ADDR", "EFFECTIVELY_CODEC_SERVER_ADDR"}},
		"pprof named":                 {env: map[string]string{"EFFECTIVELY_PPROF_ADDR": "127.0.0.1:6060", EnvPublicListeners: "pprof"}, refused: `"pprof" is not one of`},
		"unknown name":                {env: map[string]string{EnvPublicListeners: "metrics"}, refused: `"metrics" is not one of`},
		"all public, opted in": {
			env:    codec(":8234", webhook(":8082", map[string]string{"EFFECTIVELY_HEALTH_ADDR": ":8081", EnvAllowPublicListeners: "true"})),
			warned: []string{"EFFECTIVELY_HEALTH_ADDR", "EFFECTIVELY_WEBHOOK_ADDR", "EFFECTIVELY_CODEC_SERVER_ADDR"},
		},
	}
	for name, tt := range tests {
		c, err := validate(t, base(tt.env))
		if tt.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tt.refused) {
				t.Errorf("%s: err = %v, want it refused naming %q", name, err, tt.refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		var warned []string
		for _, l := range c.PublicListeners() {
			warned = append(warned, l.Variable)
			if l.Name == "" || l.Addr == "" {
				t.Errorf("%s: warning without a name or an address: %+v", name, l)
			}
		}
		if strings.Join(warned, ",") != strings.Join(tt.warned, ",") {
			t.Errorf("%s: warned about %v, want %v", name, warned, tt.warned)
		}
	}
}

func TestProviderURLs(t *testing.T) {
	tests := map[string]struct {
		env map[string]string
		// refused names what the error must mention; empty: accepted.
		refused string
	}{
		"defaults, live keys":            {env: map[string]string{"STRIPE_API_KEY": "sk_live_x"}},
		"stripe https":                   {env: map[string]string{"STRIPE_BASE_URL": "https://stripe-proxy.example.com"}},
		"stripe http loopback":           {env: map[string]string{"STRIPE_BASE_URL": "http://127.0.0.1:12111"}},
		"stripe http 127.5.5.5":          {env: map[string]string{"STRIPE_BASE_URL": "http://127.5.5.5:12111"}},
		"stripe http ::1":                {env: map[string]string{"STRIPE_BASE_URL": "http://[::1]:12111"}},
		"stripe http localhost":          {env: map[string]string{"STRIPE_BASE_URL": "http://localhost:12111"}},
		"stripe http host, test key":     {env: map[string]string{"STRIPE_BASE_URL": "http://simulators:12111"}},
		"stripe http host, rk_test":      {env: map[string]string{"STRIPE_BASE_URL": "http://simulators:12111", "STRIPE_API_KEY": "rk_test_x"}},
		"stripe http host, other key":    {env: map[string]string{"STRIPE_BASE_URL": "http://simulators:12111", "STRIPE_API_KEY": "k"}, refused: "STRIPE_BASE_URL"},
		"stripe http host, opt-in":       {env: map[string]string{"STRIPE_BASE_URL": "http://simulators:12111", "STRIPE_API_KEY": "k", EnvAllowInsecureProviderURLs: "true"}, refused: "test STRIPE_API_KEY"},
		"stripe ftp":                     {env: map[string]string{"STRIPE_BASE_URL": "ftp://127.0.0.1"}, refused: "STRIPE_BASE_URL"},
		"stripe no host":                 {env: map[string]string{"STRIPE_BASE_URL": "127.0.0.1:12111"}, refused: "STRIPE_BASE_URL"},
		"live key, stripe itself":        {env: map[string]string{"STRIPE_API_KEY": "sk_live_x", "STRIPE_BASE_URL": "https://api.stripe.com/"}},
		"live key, https proxy":          {env: map[string]string{"STRIPE_API_KEY": "sk_live_x", "STRIPE_BASE_URL": "https://stripe-proxy.example.com"}, refused: "live STRIPE_API_KEY"},
		"live key, loopback":             {env: map[string]string{"STRIPE_API_KEY": "sk_live_x", "STRIPE_BASE_URL": "http://127.0.0.1:12111"}, refused: "STRIPE_BASE_URL"},
		"live restricted key, simulator": {env: map[string]string{"STRIPE_API_KEY": "rk_live_x", "STRIPE_BASE_URL": "http://simulators:12111"}, refused: "live STRIPE_API_KEY"},
		"sendgrid https":                 {env: map[string]string{"SENDGRID_BASE_URL": "https://sendgrid-proxy.example.com"}},
		"sendgrid http loopback":         {env: map[string]string{"SENDGRID_BASE_URL": "http://127.0.0.1:12112"}},
		"sendgrid http host":             {env: map[string]string{"SENDGRID_BASE_URL": "http://simulators:12112"}, refused: "EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS"},
		"sendgrid http host, opt-in":     {env: map[string]string{"SENDGRID_BASE_URL": "http://simulators:12112", EnvAllowInsecureProviderURLs: "true"}},
		"sendgrid http 10.0.0.1":         {env: map[string]string{"SENDGRID_BASE_URL": "http://10.0.0.1:12112"}, refused: "SENDGRID_BASE_URL"},
		"opt-in not a bool":              {env: map[string]string{EnvAllowInsecureProviderURLs: "maybe"}, refused: "EFFECTIVELY_ALLOW_INSECURE_PROVIDER_URLS"},
	}
	for name, tt := range tests {
		_, err := validate(t, base(tt.env))
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
			t.Errorf("%s: err = %v, want it refused naming %q", name, err, tt.refused)
		}
	}
}

// TestProviderURLErrorsHideCredentials: a URL's user information never
// reaches the error, which the worker logs.
func TestProviderURLErrorsHideCredentials(t *testing.T) {
	_, err := validate(t, base(map[string]string{"SENDGRID_BASE_URL": "http://user:SECRET@10.0.0.1:12112"}))
	if err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("err = %v, want a refusal without the password", err)
	}
}
