package config

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

func env(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadDefaultsAndValidate(t *testing.T) {
	c, err := Load(env(map[string]string{"STRIPE_API_KEY": "sk_test_x", "SENDGRID_API_KEY": "SG.x"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.TaskQueue != "effectively" || c.Email.From != "receipts@effectively.local" || c.EmailPolicy != "at-least-once" || c.DrainTimeout != DefaultDrainTimeout {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheVariable(t *testing.T) {
	tests := map[string]struct {
		env  map[string]string
		want string
	}{
		"no stripe key":  {map[string]string{"SENDGRID_API_KEY": "SG.x"}, "STRIPE_API_KEY"},
		"bad policy":     {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "EMAIL_POLICY": "sometimes"}, "EMAIL_POLICY"},
		"key window":     {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "PAYMENT_SCHEDULE_TO_CLOSE": "30h"}, "24h0m0s"},
		"bad duration":   {map[string]string{"PAYMENT_SCHEDULE_TO_CLOSE": "soon"}, "PAYMENT_SCHEDULE_TO_CLOSE"},
		"bad log level":  {map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		"local budget":   {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "PAYMENT_SCHEDULE_TO_CLOSE": "23h", "LOCAL_START_TO_CLOSE": "1m"}, "local attempt"},
		"short attempt":  {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "EMAIL_START_TO_CLOSE": "3s"}, "EmailStartToClose is 3s: at least 4s"},
		"poll past max":  {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "PAYMENT_PROCESSING_POLL": "2h", "PAYMENT_PROCESSING_MAX_WAIT": "1h"}, "PaymentProcessingPoll"},
		"tiny pool":      {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "DATABASE_MAX_CONNS": "2"}, "DATABASE_MAX_CONNS"},
		"bad drain":      {map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "EFFECTIVELY_DRAIN_TIMEOUT": "-1s"}, "EFFECTIVELY_DRAIN_TIMEOUT"},
		"bad namespace":  {map[string]string{"EFFECTIVELY_KEY_NAMESPACE": "eu/1"}, "EFFECTIVELY_KEY_NAMESPACE"},
		"long namespace": {map[string]string{"EFFECTIVELY_KEY_NAMESPACE": strings.Repeat("n", 65)}, "EFFECTIVELY_KEY_NAMESPACE"},
	}
	for name, tt := range tests {
		c, err := Load(env(tt.env))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tt.want)
		}
	}
}

// TestKeyNamespace: empty by default (keys unscoped), and one variable
// scopes the Stripe client, the SendGrid client and the webhooks alike.
func TestKeyNamespace(t *testing.T) {
	c, err := Load(env(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if c.KeyNamespace != "" || c.Stripe.Namespace != "" || c.Email.Namespace != "" || c.Webhooks.Namespace != "" {
		t.Fatalf("default namespace %q/%q/%q/%q, want none", c.KeyNamespace, c.Stripe.Namespace, c.Email.Namespace, c.Webhooks.Namespace)
	}
	c, err = Load(env(map[string]string{"EFFECTIVELY_KEY_NAMESPACE": " eu-1 "}))
	if err != nil {
		t.Fatal(err)
	}
	if c.KeyNamespace != "eu-1" || c.Stripe.Namespace != "eu-1" || c.Email.Namespace != "eu-1" || c.Webhooks.Namespace != "eu-1" {
		t.Fatalf("namespace %q/%q/%q/%q, want eu-1 everywhere", c.KeyNamespace, c.Stripe.Namespace, c.Email.Namespace, c.Webhooks.Namespace)
	}
}

func TestLogValueHidesSecrets(t *testing.T) {
	c, _ := Load(env(map[string]string{"STRIPE_API_KEY": "sk_test_SECRET123", "SENDGRID_API_KEY": "SG.SECRET456"}))
	s := c.LogValue().String()
	if strings.Contains(s, "SECRET") {
		t.Fatalf("secret in log value: %s", s)
	}
}

// TestCodecRequire: EFFECTIVELY_CODEC_REQUIRE needs keys, refused at load
// so that the worker and the starter both exit 2, and is off by default.
func TestCodecRequire(t *testing.T) {
	const keys = "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	for _, v := range []string{"true", "1", " TRUE "} {
		_, err := Load(env(map[string]string{"EFFECTIVELY_CODEC_REQUIRE": v}))
		if err == nil {
			t.Errorf("REQUIRE=%q without keys: accepted", v)
			continue
		}
		for _, want := range []string{"EFFECTIVELY_CODEC_REQUIRE", "EFFECTIVELY_CODEC_KEYS", "EFFECTIVELY_CODEC_KEY_FILE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("REQUIRE=%q without keys: error %q does not name %s", v, err, want)
			}
		}
	}
	if _, err := Load(env(map[string]string{"EFFECTIVELY_CODEC_REQUIRE": "yes", "EFFECTIVELY_CODEC_KEYS": keys})); err == nil ||
		!strings.Contains(err.Error(), `EFFECTIVELY_CODEC_REQUIRE="yes"`) {
		t.Errorf("REQUIRE=yes: err = %v, want one naming the variable", err)
	}
	for v, want := range map[string]bool{"": false, "false": false, "true": true} {
		c, err := Load(env(map[string]string{"EFFECTIVELY_CODEC_REQUIRE": v, "EFFECTIVELY_CODEC_KEYS": keys}))
		if err != nil {
			t.Fatalf("REQUIRE=%q with keys: %v", v, err)
		}
		if c.Temporal.RequireEncryption != want {
			t.Errorf("REQUIRE=%q: RequireEncryption = %v, want %v", v, c.Temporal.RequireEncryption, want)
		}
	}
	for _, v := range []string{"", "false"} {
		if _, err := Load(env(map[string]string{"EFFECTIVELY_CODEC_REQUIRE": v})); err != nil {
			t.Errorf("REQUIRE=%q without keys: %v", v, err)
		}
	}
}

// TestGRPCCompressionFollowsTheAddress: unset, the compression is chosen by
// TEMPORAL_ADDRESS (none to a local address, gzip to any other); an
// explicit value wins.
func TestGRPCCompressionFollowsTheAddress(t *testing.T) {
	for _, tc := range []struct {
		address, value string
		gzip           bool
	}{
		{"", "", false}, // the SDK's default, localhost:7233
		{"127.0.0.1:7233", "", false},
		{"192.168.1.20:7233", "auto", false},
		{"temporal:7233", "", true},
		{"ns.acct.tmprl.cloud:7233", "", true},
		{"127.0.0.1:7233", "gzip", true},
		{"temporal:7233", "none", false},
	} {
		m := map[string]string{}
		if tc.address != "" {
			m["TEMPORAL_ADDRESS"] = tc.address
		}
		if tc.value != "" {
			m["EFFECTIVELY_GRPC_COMPRESSION"] = tc.value
		}
		c, err := Load(env(m))
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		_, gzip := c.Temporal.Options.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionGzip)
		_, none := c.Temporal.Options.ConnectionOptions.GrpcCompression.(*client.GrpcCompressionNone)
		if gzip != tc.gzip || none == tc.gzip {
			t.Errorf("TEMPORAL_ADDRESS=%q EFFECTIVELY_GRPC_COMPRESSION=%q: compression %T, want gzip %v",
				tc.address, tc.value, c.Temporal.Options.ConnectionOptions.GrpcCompression, tc.gzip)
		}
	}
	if _, err := Load(env(map[string]string{"EFFECTIVELY_GRPC_COMPRESSION": "zstd"})); err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_GRPC_COMPRESSION") {
		t.Errorf("zstd: err = %v, want one naming the variable", err)
	}
}
