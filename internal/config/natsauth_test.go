package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectively/effectively/tools/natstest"
)

// writeFile writes content to a new file in a temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNATSAuthRefusesConflictsNamingTheVariables: two credentials at once,
// half a pair and a file that does not read or parse stop the load, with
// an error naming the variables and quoting no secret.
func TestNATSAuthRefusesConflictsNamingTheVariables(t *testing.T) {
	const secret = "pw_7c1e_secret"
	pki := natstest.NewPKI(t)
	nk := natstest.NewNkey(t)
	pwFile := writeFile(t, "pw", secret+"\n")
	empty := writeFile(t, "empty", "\n")
	garbage := writeFile(t, "garbage", secret)
	missing := filepath.Join(t.TempDir(), "missing")
	tests := map[string]struct {
		env  map[string]string
		want []string
	}{
		"token and user":           {map[string]string{"NATS_TOKEN": secret, "NATS_USER": "u", "NATS_PASSWORD": secret}, []string{"NATS_TOKEN", "NATS_USER"}},
		"creds and nkey":           {map[string]string{"NATS_CREDS_FILE": garbage, "NATS_NKEY_SEED_FILE": nk.SeedFile}, []string{"NATS_NKEY_SEED_FILE", "NATS_CREDS_FILE"}},
		"token file and nkey":      {map[string]string{"NATS_TOKEN_FILE": pwFile, "NATS_NKEY_SEED_FILE": nk.SeedFile}, []string{"NATS_TOKEN", "NATS_NKEY_SEED_FILE"}},
		"password without user":    {map[string]string{"NATS_PASSWORD": secret}, []string{"NATS_PASSWORD", "without NATS_USER"}},
		"password file, no user":   {map[string]string{"NATS_PASSWORD_FILE": pwFile}, []string{"NATS_PASSWORD_FILE", "without NATS_USER"}},
		"user without password":    {map[string]string{"NATS_USER": "u"}, []string{"NATS_USER is set without NATS_PASSWORD"}},
		"password twice":           {map[string]string{"NATS_USER": "u", "NATS_PASSWORD": secret, "NATS_PASSWORD_FILE": pwFile}, []string{"NATS_PASSWORD and NATS_PASSWORD_FILE"}},
		"token twice":              {map[string]string{"NATS_TOKEN": secret, "NATS_TOKEN_FILE": pwFile}, []string{"NATS_TOKEN and NATS_TOKEN_FILE"}},
		"cert without key":         {map[string]string{"NATS_TLS_CERT_FILE": pki.ClientCert}, []string{"NATS_TLS_CERT_FILE and NATS_TLS_KEY_FILE"}},
		"key without cert":         {map[string]string{"NATS_TLS_KEY_FILE": pki.ClientKey}, []string{"NATS_TLS_CERT_FILE and NATS_TLS_KEY_FILE"}},
		"cert with another's key":  {map[string]string{"NATS_TLS_CERT_FILE": pki.ClientCert, "NATS_TLS_KEY_FILE": pki.ServerKey}, []string{"NATS_TLS_CERT_FILE"}},
		"url credentials and user": {map[string]string{"NATS_URL": "nats://a:" + secret + "@h:4222", "NATS_USER": "u", "NATS_PASSWORD": secret}, []string{"NATS_URL carries credentials"}},
		"url token and a token":    {map[string]string{"NATS_URL": "nats://h:1,nats://" + secret + "@h:4222", "NATS_TOKEN": secret}, []string{"NATS_URL carries credentials", "NATS_TOKEN"}},
		"missing password file":    {map[string]string{"NATS_USER": "u", "NATS_PASSWORD_FILE": missing}, []string{"NATS_PASSWORD_FILE", "no such file"}},
		"empty token file":         {map[string]string{"NATS_TOKEN_FILE": empty}, []string{"NATS_TOKEN_FILE", "is empty"}},
		"seed file without a seed": {map[string]string{"NATS_NKEY_SEED_FILE": garbage}, []string{"NATS_NKEY_SEED_FILE", "no nkey seed"}},
		"missing seed file":        {map[string]string{"NATS_NKEY_SEED_FILE": missing}, []string{"NATS_NKEY_SEED_FILE", "no such file"}},
		"creds file without a JWT": {map[string]string{"NATS_CREDS_FILE": garbage}, []string{"NATS_CREDS_FILE", "no user JWT"}},
		"creds file with no seed":  {map[string]string{"NATS_CREDS_FILE": writeFile(t, "c", "-----BEGIN NATS USER JWT-----\na.b.c\n------END NATS USER JWT------\n")}, []string{"NATS_CREDS_FILE", "no user nkey seed"}},
		"ca file not PEM":          {map[string]string{"NATS_TLS_CA_FILE": garbage}, []string{"NATS_TLS_CA_FILE", "no PEM certificate"}},
		"missing ca file":          {map[string]string{"NATS_TLS_CA_FILE": missing}, []string{"NATS_TLS_CA_FILE", "no such file"}},
	}
	for name, tt := range tests {
		_, err := Load(env(tt.env))
		if err == nil {
			t.Errorf("%s: loaded, want an error mentioning %q", name, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err = %v\nwant it to mention %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the secret: %v", name, err)
		}
	}
}

// TestNATSAuthAccepted: each credential alone, with TLS, loads; the files'
// values are read and the log value names the method, never the secret.
func TestNATSAuthAccepted(t *testing.T) {
	const secret = "tok_51aa_secret"
	pki := natstest.NewPKI(t)
	nk := natstest.NewNkey(t)
	tokenFile := writeFile(t, "token", "  "+secret+"\n")
	tests := map[string]struct {
		env         map[string]string
		method, tls string
		check       func(NATSAuth) bool
	}{
		"user":       {env: map[string]string{"NATS_USER": "worker", "NATS_PASSWORD": secret}, method: "user", tls: "url"},
		"token file": {env: map[string]string{"NATS_TOKEN_FILE": tokenFile}, method: "token", tls: "url", check: func(a NATSAuth) bool { return a.Token == secret }},
		"nkey, mtls": {env: map[string]string{"NATS_NKEY_SEED_FILE": nk.SeedFile, "NATS_TLS_CA_FILE": pki.CA, "NATS_TLS_CERT_FILE": pki.ClientCert, "NATS_TLS_KEY_FILE": pki.ClientKey}, method: "nkey", tls: "ca+client-cert"},
		"ca only":    {env: map[string]string{"NATS_TLS_CA_FILE": pki.CA}, method: "none", tls: "ca"},
		"creds":      {env: map[string]string{"NATS_CREDS_FILE": natstest.NewDecentralized(t).CredsFile}, method: "creds", tls: "url"},
	}
	for name, tt := range tests {
		tt.env["STRIPE_API_KEY"], tt.env["SENDGRID_API_KEY"] = "k", "k"
		c, err := Load(env(tt.env))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if c.NATS.Auth.Method() != tt.method || c.NATS.Auth.TLS() != tt.tls || tt.check != nil && !tt.check(c.NATS.Auth) {
			t.Errorf("%s: auth %+v: method %s tls %s", name, c.NATS.Auth, c.NATS.Auth.Method(), c.NATS.Auth.TLS())
		}
		s := c.LogValue().String()
		if strings.Contains(s, secret) || !strings.Contains(s, "nats_auth="+tt.method) || !strings.Contains(s, "nats_tls="+tt.tls) {
			t.Errorf("%s: log value: %s", name, s)
		}
		if _, err := c.NATS.Options(); err != nil {
			t.Errorf("%s: options: %v", name, err)
		}
	}
}
