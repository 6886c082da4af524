package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/effectively/effectively/tools/natstest"
)

// connectWith loads the configuration m (the NATS_* variables) and connects
// as the worker and the starter do, through NATS.Connect.
func connectWith(t *testing.T, m map[string]string) (*nats.Conn, error) {
	t.Helper()
	c, err := Load(env(m))
	if err != nil {
		t.Fatalf("load %v: %v", keys(m), err)
	}
	return c.NATS.Connect("effectively-test", nats.Timeout(5*time.Second))
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// with returns base with the given NAME=value pairs added.
func with(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// mustConnect connects and checks the connection carries a round trip.
func mustConnect(t *testing.T, name string, m map[string]string) *nats.Conn {
	t.Helper()
	nc, err := connectWith(t, m)
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", name, err)
	}
	return nc
}

// mustFail connects and wants an error containing want.
func mustFail(t *testing.T, name string, m map[string]string, want string) {
	t.Helper()
	nc, err := connectWith(t, m)
	if err == nil {
		nc.Close()
		t.Errorf("%s: connected, want a refusal (%s)", name, want)
		return
	}
	if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
		t.Errorf("%s: err = %v, want it to mention %q", name, err, want)
	}
}

// TestNATSUserAndNkeyOverTLS runs a real nats-server that requires TLS and
// knows a user with a password and an nkey user: each connects over a
// nats:// URL with the CA; a wrong or missing credential, no CA and the
// wrong CA are refused.
func TestNATSUserAndNkeyOverTLS(t *testing.T) {
	pki := natstest.NewPKI(t)
	nk := natstest.NewNkey(t)
	const password = "pw_e0b7_worker"
	srv := natstest.Start(t, natstest.TLSBlock(pki, false)+fmt.Sprintf(
		"authorization {\n  users: [\n    {user: worker, password: %q}\n    {nkey: %s}\n  ]\n}\n", password, nk.Public))
	base := map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA}

	mustConnect(t, "user and password", with(base, "NATS_USER", "worker", "NATS_PASSWORD", password))
	mustConnect(t, "password file", with(base, "NATS_USER", "worker", "NATS_PASSWORD_FILE", writeFile(t, "pw", password+"\n")))
	mustConnect(t, "nkey", with(base, "NATS_NKEY_SEED_FILE", nk.SeedFile))
	mustConnect(t, "nkey, localhost, tls://", with(base, "NATS_URL", srv.URL("tls", "localhost"), "NATS_NKEY_SEED_FILE", nk.SeedFile))

	mustFail(t, "wrong password", with(base, "NATS_USER", "worker", "NATS_PASSWORD", "wrong"), "authorization violation")
	mustFail(t, "unknown user", with(base, "NATS_USER", "intruder", "NATS_PASSWORD", password), "authorization violation")
	mustFail(t, "no credential", base, "authorization violation")
	mustFail(t, "an nkey the server does not know", with(base, "NATS_NKEY_SEED_FILE", natstest.NewNkey(t).SeedFile), "authorization violation")
	mustFail(t, "no CA", map[string]string{"NATS_URL": base["NATS_URL"], "NATS_USER": "worker", "NATS_PASSWORD": password}, "x509")
	mustFail(t, "another CA", with(base, "NATS_TLS_CA_FILE", pki.OtherCA, "NATS_USER", "worker", "NATS_PASSWORD", password), "x509")
	if strings.Contains(srv.Log(), password) {
		t.Errorf("the server logged the password:\n%s", srv.Log())
	}
}

// TestNATSTokenOverTLS: a server with a token accepts NATS_TOKEN and
// NATS_TOKEN_FILE and refuses another token.
func TestNATSTokenOverTLS(t *testing.T) {
	pki := natstest.NewPKI(t)
	const token = "tok_3f9d_worker"
	srv := natstest.Start(t, natstest.TLSBlock(pki, false)+fmt.Sprintf("authorization {\n  token: %q\n}\n", token))
	base := map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA}
	mustConnect(t, "token", with(base, "NATS_TOKEN", token))
	mustConnect(t, "token file", with(base, "NATS_TOKEN_FILE", writeFile(t, "token", token+"\n")))
	mustFail(t, "wrong token", with(base, "NATS_TOKEN", "tok_wrong"), "authorization violation")
	mustFail(t, "no token", base, "authorization violation")
}

// TestNATSCredentialFileRotation: the token and password files are read
// again at each reconnection. The file is rewritten, the server's
// credential changed and reloaded; the server drops the connection with the
// old one and the client comes back with the new one, without a restart.
func TestNATSCredentialFileRotation(t *testing.T) {
	pki := natstest.NewPKI(t)
	tests := map[string]struct {
		conf func(secret string) string
		file string // the variable holding the file
		env  map[string]string
	}{
		"token": {
			conf: func(s string) string { return fmt.Sprintf("authorization {\n  token: %q\n}\n", s) },
			file: "NATS_TOKEN_FILE",
		},
		"password": {
			conf: func(s string) string {
				return fmt.Sprintf("authorization {\n  users: [ {user: worker, password: %q} ]\n}\n", s)
			},
			file: "NATS_PASSWORD_FILE",
			env:  map[string]string{"NATS_USER": "worker"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			srv := natstest.Start(t, natstest.TLSBlock(pki, false)+tt.conf("old_secret_1111"))
			file := writeFile(t, "secret", "old_secret_1111\n")
			c, err := Load(env(with(tt.env, "NATS_URL", srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE", pki.CA, tt.file, file)))
			if err != nil {
				t.Fatal(err)
			}
			reconnected := make(chan struct{}, 1)
			nc, err := c.NATS.Connect("effectively-test", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
				nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { t.Logf("async error (expected once): %v", err) }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()

			if err := os.WriteFile(file, []byte("new_secret_2222\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			srv.Reload(t, natstest.TLSBlock(pki, false)+tt.conf("new_secret_2222"))
			select {
			case <-reconnected:
			case <-time.After(15 * time.Second):
				t.Fatalf("no reconnection with the new %s; server log:\n%s", name, srv.Log())
			}
			if err := nc.Flush(); err != nil {
				t.Fatalf("after the rotation: %v", err)
			}
			if !strings.Contains(srv.Log(), "Reloaded") {
				t.Errorf("the server did not log a reload:\n%s", srv.Log())
			}
		})
	}
}

// TestNATSMutualTLS: a server that verifies client certificates accepts
// NATS_TLS_CERT_FILE and NATS_TLS_KEY_FILE signed by its CA, and refuses a
// client without a certificate or with one of another CA.
func TestNATSMutualTLS(t *testing.T) {
	pki := natstest.NewPKI(t)
	srv := natstest.Start(t, natstest.TLSBlock(pki, true))
	base := map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA}
	mustConnect(t, "client certificate", with(base, "NATS_TLS_CERT_FILE", pki.ClientCert, "NATS_TLS_KEY_FILE", pki.ClientKey))
	// Under TLS 1.3 the client may see the server's alert or only the
	// closed connection; the server says why.
	mustFail(t, "no client certificate", base, "tls")
	mustFail(t, "a client certificate of another CA", with(base, "NATS_TLS_CERT_FILE", pki.OtherClientCert, "NATS_TLS_KEY_FILE", pki.OtherClientKey), "tls")
	for deadline := time.Now().Add(5 * time.Second); strings.Count(srv.Log(), "TLS handshake error") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log two TLS handshake errors:\n%s", srv.Log())
		}
	}
}

// TestNATSCARefusesPlaintext: with NATS_TLS_CA_FILE set, a server that does
// not offer TLS is refused rather than spoken to in the clear.
func TestNATSCARefusesPlaintext(t *testing.T) {
	pki := natstest.NewPKI(t)
	srv := natstest.Start(t, "")
	mustConnect(t, "plain, no TLS asked", map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1")})
	mustFail(t, "plain server, CA set", map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA}, "secure connection")
}

// TestNATSCredsFile: a server in operator (JWT) mode accepts the user of
// NATS_CREDS_FILE and refuses a client without it.
func TestNATSCredsFile(t *testing.T) {
	pki := natstest.NewPKI(t)
	d := natstest.NewDecentralized(t)
	srv := natstest.Start(t, natstest.TLSBlock(pki, false)+d.Conf)
	base := map[string]string{"NATS_URL": srv.URL("nats", "127.0.0.1"), "NATS_TLS_CA_FILE": pki.CA}
	mustConnect(t, "creds file", with(base, "NATS_CREDS_FILE", d.CredsFile))
	mustFail(t, "no creds", base, "authorization violation")
	mustFail(t, "another operator's user", with(base, "NATS_CREDS_FILE", natstest.NewDecentralized(t).CredsFile), "authorization violation")
}
