package config

import (
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/sim/sendgridsim"
)

func TestWebhookSettings(t *testing.T) {
	_, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	off, err := Load(env(with()))
	if err != nil {
		t.Fatal(err)
	}
	if off.Webhooks.Enabled() || off.EmailResendGrace != 0 || off.WebhookAddr != "127.0.0.1:8082" {
		t.Fatalf("defaults: enabled %v grace %s addr %q, want off, 0, 127.0.0.1:8082", off.Webhooks.Enabled(), off.EmailResendGrace, off.WebhookAddr)
	}

	on, err := Load(env(with("STRIPE_WEBHOOK_SECRETS", " whsec_new , whsec_old,", "SENDGRID_WEBHOOK_PUBLIC_KEY", pub,
		"STRIPE_WEBHOOK_TOLERANCE", "2m", "EFFECTIVELY_WEBHOOK_ADDR", "127.0.0.1:9999")))
	if err != nil {
		t.Fatal(err)
	}
	if err := on.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(on.Webhooks.StripeSecrets, "|"); got != "whsec_new|whsec_old" {
		t.Fatalf("secrets %q, want whsec_new|whsec_old", got)
	}
	if on.EmailResendGrace != DefaultEmailResendGrace || on.Webhooks.StripeTolerance != 2*time.Minute || on.WebhookAddr != "127.0.0.1:9999" {
		t.Fatalf("grace %s tolerance %s addr %s", on.EmailResendGrace, on.Webhooks.StripeTolerance, on.WebhookAddr)
	}
	if s := on.LogValue().String(); strings.Contains(s, "whsec_") || strings.Contains(s, pub) {
		t.Fatalf("a webhook secret in the log value: %s", s)
	}

	disabled, err := Load(env(with("SENDGRID_WEBHOOK_PUBLIC_KEY", pub, "EMAIL_RESEND_GRACE", "0")))
	if err != nil || disabled.EmailResendGrace != 0 {
		t.Fatalf("EMAIL_RESEND_GRACE=0: grace %s, %v; want 0", disabled.EmailResendGrace, err)
	}

	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"grace too long":  {with("EMAIL_RESEND_GRACE", "2m"), "EMAIL_RESEND_GRACE"},
		"no time to send": {with("EMAIL_RESEND_GRACE", "57s"), "at least 4s after it"},
		"bad key":         {with("SENDGRID_WEBHOOK_PUBLIC_KEY", "bm90IGEga2V5"), "SENDGRID_WEBHOOK_PUBLIC_KEY"},
		"listener off":    {with("STRIPE_WEBHOOK_SECRETS", "whsec_x", "EFFECTIVELY_WEBHOOK_ADDR", "off"), "EFFECTIVELY_WEBHOOK_ADDR"},
		"bad grace":       {with("EMAIL_RESEND_GRACE", "soon"), "EMAIL_RESEND_GRACE"},
		"negative toler.": {with("STRIPE_WEBHOOK_TOLERANCE", "-1s"), "STRIPE_WEBHOOK_TOLERANCE"},
	} {
		c, err := Load(env(tc.env))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, tc.want)
		}
	}
}
