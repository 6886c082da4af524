package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/testenv"
)

// TestSourcesPerRoute: NATS_CONSUMER_PER_ROUTE builds a durable consumer
// per route (NATS_CONSUMER-<consumer>, on the route's subject, source
// jetstream-<consumer>) before the shared one; with a NATS_SUBJECT that
// names one subject for every type it is refused as bad configuration.
// Turned off again, the durables it left are retired (jetstream.Retiring).
func TestSourcesPerRoute(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	in := testenv.UnreachableIntake(t)
	load := func(subject string) config.Config {
		vals := map[string]string{"NATS_URL": testenv.NATSURL(), "NATS_STREAM": j.Stream, "NATS_SUBJECT": subject,
			"NATS_CONSUMER": "perroute", "NATS_CONSUMER_PER_ROUTE": "true"}
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := vals[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	b := &broker{js: j.JS}
	sources, err := buildSources(t.Context(), load(j.Subject), in, b, nil, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sources {
		names = append(names, s.Name())
	}
	if want := []string{"jetstream-order-placed", "jetstream-order-refund", "jetstream"}; !slices.Equal(names, want) {
		t.Fatalf("sources %v, want %v", names, want)
	}
	for _, r := range []struct{ durable, typ string }{{"perroute-order-placed", "order.placed"}, {"perroute-order-refund", "order.refund_requested"}} {
		c, err := j.JS.Consumer(t.Context(), j.Stream, r.durable)
		if err != nil {
			t.Fatalf("durable %s: %v", r.durable, err)
		}
		want, err := jetstream.PublishSubject(j.Subject, r.typ)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.FilterSubject; got != want {
			t.Errorf("durable %s filters %q, want %q", r.durable, got, want)
		}
	}
	if _, err := buildSources(t.Context(), load("one.subject"), in, b, nil, testenv.Logger(t)); !errors.Is(err, errBadConfig) {
		t.Fatalf("per route with one subject for every type: %v, want a configuration error", err)
	}

	// Turned off, the routes' durables are left: each is retired by a
	// source of its own, beside the shared consumer.
	off := load(j.Subject)
	off.NATS.PerRoute, off.NATS.RouteWait = false, false
	if sources, err = buildSources(t.Context(), off, in, b, nil, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, s := range sources {
		if _, retiring := s.(*jetstream.Retiring); retiring != (s.Name() != "jetstream") {
			t.Errorf("source %s is a %T", s.Name(), s)
		}
		names = append(names, s.Name())
	}
	slices.Sort(names)
	if want := []string{"jetstream", "jetstream-order-placed", "jetstream-order-refund"}; !slices.Equal(names, want) {
		t.Fatalf("sources with the setting off and its durables left: %v, want %v", names, want)
	}
}
