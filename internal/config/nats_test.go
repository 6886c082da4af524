package config

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake/jetstream"
)

func TestNATSDefaults(t *testing.T) {
	c, err := Load(env(map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	js := c.NATS.JetStream
	if !c.NATS.Enabled() || c.NATS.URL != DefaultNATSURL || js.Stream != "EFFECTIVELY" || js.Subject != "effectively.messages.>" ||
		js.Durable != "effectively-worker" || js.AckWait != 30*time.Second || js.MaxDeliver != 5 ||
		!reflect.DeepEqual(js.BackOff, jetstream.DefaultBackOff) || c.NATS.EventsStream != "EFFECTIVELY_EVENTS" ||
		c.NATS.EventsPrefix != "effectively.events" || c.NATS.DuplicateWindow != 2*time.Minute || js.Handlers != 64 {
		t.Fatalf("NATS defaults not applied: %+v", c.NATS)
	}
	if c.Retention != 30*24*time.Hour || c.PruneEvery != time.Hour || c.QuarantineRetention != 30*24*time.Hour {
		t.Fatalf("retention defaults: %s, quarantine %s, every %s", c.Retention, c.QuarantineRetention, c.PruneEvery)
	}
}

// TestRouteBacklogWaitsFollowsPerRoute: NATS_CONSUMER_PER_ROUTE unset is on
// exactly when NATS_SUBJECT ends in .> (one subject per type, the default);
// NATS_ROUTE_BACKLOG_WAITS unset is on exactly when NATS_CONSUMER_PER_ROUTE
// is. Given, each is taken as given.
func TestRouteBacklogWaitsFollowsPerRoute(t *testing.T) {
	for _, tt := range []struct {
		subject, perRoute, wait string
		wantPerRoute, wantWait  bool
	}{
		{"", "", "", true, true},
		{"orders.>", "", "", true, true},
		{"orders.all", "", "", false, false},
		{"", "true", "", true, true},
		{"", "false", "", false, false},
		{"", "true", "false", true, false},
		{"", "true", "true", true, true},
	} {
		m := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k", "NATS_SUBJECT": tt.subject, "NATS_CONSUMER_PER_ROUTE": tt.perRoute, "NATS_ROUTE_BACKLOG_WAITS": tt.wait}
		c, err := Load(env(m))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("subject %q, per route %q, wait %q: %v", tt.subject, tt.perRoute, tt.wait, err)
		}
		if c.NATS.PerRoute != tt.wantPerRoute || c.NATS.RouteWait != tt.wantWait {
			t.Errorf("subject %q, per route %q, wait %q: PerRoute %v RouteWait %v, want %v and %v", tt.subject, tt.perRoute, tt.wait, c.NATS.PerRoute, c.NATS.RouteWait, tt.wantPerRoute, tt.wantWait)
		}
	}
}

// TestQuarantineRetentionDefault: unset, QUARANTINE_RETENTION is 30 days or
// RETENTION when that is longer, so that raising RETENTION for a long
// horizon never gets the default refused; set, it is taken as given.
func TestQuarantineRetentionDefault(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{"RETENTION": "10d"}, 30 * 24 * time.Hour},
		{map[string]string{"RETENTION": "60d"}, 60 * 24 * time.Hour},
		{map[string]string{"RETENTION": "60d", "QUARANTINE_RETENTION": "7d"}, 7 * 24 * time.Hour},
		{map[string]string{"QUARANTINE_RETENTION": "90d"}, 90 * 24 * time.Hour},
	} {
		m := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}
		maps.Copy(m, tt.env)
		c, err := Load(env(m))
		if err != nil {
			t.Fatal(err)
		}
		if c.QuarantineRetention != tt.want {
			t.Errorf("%v: quarantine retention %s, want %s", tt.env, c.QuarantineRetention, tt.want)
		}
	}
}

func TestNATSSettings(t *testing.T) {
	c, err := Load(env(map[string]string{
		"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k",
		"NATS_URL": "off", "RETENTION": "45d", "NATS_BACKOFF": "none", "NATS_MAX_DELIVER": "2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.NATS.Enabled() || c.Retention != 45*24*time.Hour || c.NATS.JetStream.BackOff == nil || len(c.NATS.JetStream.BackOff) != 0 {
		t.Fatalf("settings not applied: %+v retention %s", c.NATS, c.Retention)
	}
	c, err = Load(env(map[string]string{"NATS_BACKOFF": "10s, 1m", "NATS_MAX_DELIVER": "4", "NATS_HANDLERS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{10 * time.Second, time.Minute}; !reflect.DeepEqual(c.NATS.JetStream.BackOff, want) || c.NATS.JetStream.MaxDeliver != 4 {
		t.Fatalf("backoff = %v, max deliver %d", c.NATS.JetStream.BackOff, c.NATS.JetStream.MaxDeliver)
	}
	if c.NATS.JetStream.DeadLetters != "" {
		t.Fatalf("dead letters = %q unset, want the stream's default (jetstream.DeadLetterStream)", c.NATS.JetStream.DeadLetters)
	}
	if c, err := Load(env(map[string]string{"NATS_DEAD_LETTER_STREAM": "off"})); err != nil || c.NATS.JetStream.DeadLetters != jetstream.DeadLettersOff {
		t.Fatalf("NATS_DEAD_LETTER_STREAM=off: %q, %v", c.NATS.JetStream.DeadLetters, err)
	}
	if c.NATS.JetStream.Handlers != 3 {
		t.Fatalf("handlers = %d, want 3 from NATS_HANDLERS", c.NATS.JetStream.Handlers)
	}
}

func TestNATSValidateNamesTheVariable(t *testing.T) {
	base := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}
	tests := map[string]struct {
		env  map[string]string
		want string
	}{
		"unlimited max deliver":              {map[string]string{"NATS_MAX_DELIVER": "-1"}, "NATS_MAX_DELIVER"},
		"max deliver not a number":           {map[string]string{"NATS_MAX_DELIVER": "many"}, "NATS_MAX_DELIVER"},
		"max deliver under backoff":          {map[string]string{"NATS_MAX_DELIVER": "3"}, "NATS_BACKOFF"},
		"bad backoff":                        {map[string]string{"NATS_BACKOFF": "1m,soon"}, "NATS_BACKOFF"},
		"stream with a dot":                  {map[string]string{"NATS_STREAM": "a.b"}, "NATS_STREAM"},
		"consumer with a space":              {map[string]string{"NATS_CONSUMER": "a b"}, "NATS_CONSUMER"},
		"dead-letter stream with a dot":      {map[string]string{"NATS_DEAD_LETTER_STREAM": "a.b"}, "NATS_DEAD_LETTER_STREAM"},
		"subject with inner wildcard":        {map[string]string{"NATS_SUBJECT": "a.*.b"}, "NATS_SUBJECT"},
		"empty subject token":                {map[string]string{"NATS_SUBJECT": "a..>"}, "NATS_SUBJECT"},
		"bad url":                            {map[string]string{"NATS_URL": "::"}, "NATS_URL"},
		"bad second url in a list":           {map[string]string{"NATS_URL": "nats://a:4222,user:pw@b:4222"}, "NATS_URL (URL 2 of 2)"},
		"bad retention":                      {map[string]string{"RETENTION": "a while"}, "RETENTION"},
		"negative retention":                 {map[string]string{"RETENTION": "-1h"}, "RETENTION"},
		"bad quarantine retention":           {map[string]string{"QUARANTINE_RETENTION": "a while"}, "QUARANTINE_RETENTION"},
		"negative quarantine retention":      {map[string]string{"QUARANTINE_RETENTION": "-1h"}, "QUARANTINE_RETENTION"},
		"negative ack wait":                  {map[string]string{"NATS_ACK_WAIT": "-1s"}, "NATS_ACK_WAIT"},
		"bad events prefix":                  {map[string]string{"NATS_EVENTS_PREFIX": "a.>"}, "NATS_EVENTS_PREFIX"},
		"no handlers":                        {map[string]string{"NATS_HANDLERS": "0"}, "NATS_HANDLERS"},
		"negative handlers":                  {map[string]string{"NATS_HANDLERS": "-2"}, "NATS_HANDLERS"},
		"handlers not a number":              {map[string]string{"NATS_HANDLERS": "lots"}, "NATS_HANDLERS"},
		"no starters":                        {map[string]string{"NATS_STARTERS": "0"}, "NATS_STARTERS"},
		"backlog waits on a shared consumer": {map[string]string{"NATS_CONSUMER_PER_ROUTE": "false", "NATS_ROUTE_BACKLOG_WAITS": "true"}, "NATS_CONSUMER_PER_ROUTE=true"},
	}
	for name, tt := range tests {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range tt.env {
			m[k] = v
		}
		c, err := Load(env(m))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %s", name, err, tt.want)
		}
	}
}

func TestLogValueHidesNATSCredentials(t *testing.T) {
	c, err := Load(env(map[string]string{"NATS_URL": "nats://user:s3cr3t@broker:4222"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.LogValue().String(); strings.Contains(s, "s3cr3t") || !strings.Contains(s, "broker:4222") {
		t.Fatalf("log value: %s", s)
	}
}

// TestLogValueHidesNATSCredentialsInEveryURL redacts each URL of a
// comma-separated NATS_URL: parsed as one URL, the list's later URLs fell into
// the first one's path and were logged with their passwords.
func TestLogValueHidesNATSCredentialsInEveryURL(t *testing.T) {
	list := "nats://a.example:4222, nats://u2:pw-two@b.example:4222,nats://tok3n-three@c.example:4222"
	c, err := Load(env(map[string]string{"NATS_URL": list, "STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a list of three URLs: %v", err)
	}
	s := c.LogValue().String()
	for _, secret := range []string{"pw-two", "tok3n", "u2:"} {
		if strings.Contains(s, secret) {
			t.Errorf("log value holds %q: %s", secret, s)
		}
	}
	want := "nats_url=nats://a.example:4222,nats://REDACTED@b.example:4222,nats://REDACTED@c.example:4222"
	if !strings.Contains(s, want) {
		t.Errorf("log value: %s\nwant it to hold %s", s, want)
	}
}

func TestRedactURL(t *testing.T) {
	tests := map[string]string{
		"":                              "",
		"nats://127.0.0.1:4222":         "nats://127.0.0.1:4222",
		"nats://u:p@h:4222":             "nats://REDACTED@h:4222",
		"nats://token@h:4222":           "nats://REDACTED@h:4222",
		"nats://h:1,nats://u:p@h:2":     "nats://h:1,nats://REDACTED@h:2",
		"u:p@h:4222":                    "(redacted)",
		"nats://h:1,u:p@h:2":            "nats://h:1,(redacted)",
		"nats://h:1,nats://u:%zz@h:2":   "nats://h:1,(unparseable)",
		"tls://u:p@h:1 , tls://t@h:2 ,": "tls://REDACTED@h:1,tls://REDACTED@h:2,",
	}
	for in, want := range tests {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSources: jetstream by default, none with NATS_URL=off alone; a kind
// that is unknown, repeated, not built in, or jetstream without a broker is
// refused, naming the variable.
func TestSources(t *testing.T) {
	keys := map[string]string{"STRIPE_API_KEY": "k", "SENDGRID_API_KEY": "k"}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(keys)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tt := range []struct {
		env  map[string]string
		want []string
		err  string
	}{
		{env: keys, want: []string{SourceJetStream}},
		{env: with("NATS_URL", "off"), want: nil},
		{env: with(EnvSources, "jetstream"), want: []string{SourceJetStream}},
		{env: with(EnvSources, "jetstream", "NATS_URL", "off"), err: "source jetstream needs NATS_URL"},
		{env: with(EnvSources, "jetstream,jetstream"), err: "listed twice"},
		{env: with(EnvSources, "sqs"), err: `unknown source "sqs"`},
		{env: with(EnvSources, "rabbitmq", "NATS_URL", "off"), want: []string{SourceRabbitMQ}},
		{env: with(EnvSources, "jetstream,rabbitmq"), want: []string{SourceJetStream, SourceRabbitMQ}},
		{env: with(EnvSources, "kafka"), err: "the kafka source needs KAFKA_BROKERS"},
		{env: with(EnvSources, "jetstream,kafka", "KAFKA_BROKERS", "127.0.0.1:9092"), want: []string{SourceJetStream, SourceKafka}},
	} {
		c, err := Load(env(tt.env))
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%v: %v", tt.env, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), EnvSources) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%v: err = %v, want %s … %s", tt.env, err, EnvSources, tt.err)
		case tt.err == "" && !reflect.DeepEqual(c.Sources, tt.want):
			t.Errorf("%v: sources %v, want %v", tt.env, c.Sources, tt.want)
		}
	}
}
