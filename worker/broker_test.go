package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestConnectBrokerWithTLSAndUser: the worker's broker connection takes the
// NATS_* credentials and CA. Against a real nats-server requiring TLS and a
// user it creates both streams and the consumer; with a wrong password it
// fails naming the method, without the password. A rotation done in the
// wrong order (the server takes the new password, the file follows after
// several refused reconnections) still ends connected: the worker does not
// give up after two refusals as nats.go does by default.
func TestConnectBrokerWithTLSAndUser(t *testing.T) {
	pki := natstest.NewPKI(t)
	const password = "pw_broker_77d2"
	srv := natstest.Start(t, natstest.TLSBlock(pki, false)+fmt.Sprintf("authorization {\n  users: [ {user: worker, password: %q} ]\n}\n", password))
	in := testenv.UnreachableIntake(t)
	pwFile := filepath.Join(t.TempDir(), "nats-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(pw string) config.Config {
		vals := map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA, "NATS_USER": "worker", "NATS_CONSUMER_PER_ROUTE": "false"}
		if pw == "" {
			vals["NATS_PASSWORD_FILE"] = pwFile
		} else {
			vals["NATS_PASSWORD"] = pw
		}
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := vals[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	cfg := load("")
	b, err := connectBroker(t.Context(), cfg, in, testenv.Logger(t))
	if err != nil {
		t.Fatalf("connectBroker: %v", err)
	}
	defer b.close()
	if b.js == nil || b.relay == nil || !b.nc.TLSRequired() {
		t.Fatalf("broker: jetstream %v, relay %v, tls %v", b.js != nil, b.relay != nil, b.nc.TLSRequired())
	}
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cfg.NATS.JetStream.Stream, cfg.NATS.EventsStream} {
		if _, err := js.Stream(t.Context(), name); err != nil {
			t.Errorf("stream %s on the TLS server: %v", name, err)
		}
	}
	sources, err := buildSources(t.Context(), cfg, in, b, nil, testenv.Logger(t))
	if err != nil || len(sources) != 1 || sources[0].Name() != "jetstream" {
		t.Fatalf("sources %v, %v; want the jetstream source", sources, err)
	}
	if _, err := js.Consumer(t.Context(), cfg.NATS.JetStream.Stream, cfg.NATS.JetStream.Durable); err != nil {
		t.Errorf("durable consumer on the TLS server: %v", err)
	}

	_, err = connectBroker(t.Context(), load("wrong_pw_1234"), in, testenv.Logger(t))
	if err == nil || !strings.Contains(err.Error(), "credential user, tls ca") || !strings.Contains(err.Error(), "Authorization Violation") ||
		strings.Contains(err.Error(), "wrong_pw") {
		t.Fatalf("with a wrong password: %v", err)
	}

	// Rotation, server first: the connection is dropped and refused (the
	// wrong-password attempt above made one refusal already) until the
	// file holds the new password.
	const newPassword = "pw_broker_new_18e0"
	before := strings.Count(srv.Log(), "authentication error")
	srv.Reload(t, natstest.TLSBlock(pki, false)+fmt.Sprintf("authorization {\n  users: [ {user: worker, password: %q} ]\n}\n", newPassword))
	testenv.Eventually(t, 30*time.Second, "three refused reconnections with the old password, or a closed connection", func() bool {
		return strings.Count(srv.Log(), "authentication error") >= before+3 || b.nc.IsClosed()
	})
	if b.nc.IsClosed() {
		t.Fatal("the worker's connection gave up after refused reconnections")
	}
	if err := os.WriteFile(pwFile, []byte(newPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "reconnected with the new password", b.nc.IsConnected)
}
