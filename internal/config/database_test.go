package config

import (
	"strings"
	"testing"
)

// TestDatabaseTLSWarning: a Postgres beyond loopback without verified TLS is
// warned about, naming the host and the mode but not the password; loopback,
// sockets and verify-full are not.
func TestDatabaseTLSWarning(t *testing.T) {
	tests := map[string]string{ // DATABASE_URL: the warning's mode, or "" for none
		"": "", // the default, loopback with disable
		"postgres://postgres@127.0.0.1:5432/effectively?sslmode=disable":                   "",
		"postgres://u:pw_db_secret@localhost/db":                                           "",
		"postgres://u:pw_db_secret@[::1]:5432/db?sslmode=disable":                          "",
		"postgres:///db?host=/var/run/postgresql":                                          "",
		"host=/tmp dbname=db":                                                              "",
		"postgres://u:pw_db_secret@db.internal:5432/db?sslmode=disable":                    "sslmode=disable",
		"postgres://u:pw_db_secret@db.internal:5432/db":                                    "sslmode=prefer",
		"postgres://u:pw_db_secret@10.0.0.5/db?sslmode=allow":                              "sslmode=allow",
		"postgres://u@127.0.0.1:5432,db2.internal:5432/db?sslmode=prefer":                  "sslmode=prefer",
		"host=db.internal password=pw_db_secret sslmode=disable":                           "sslmode=disable",
		"postgres://u:pw_db_secret@db.internal/db?sslmode=require":                         "",
		"postgres://u:pw_db_secret@db.internal/db?sslmode=verify-full&sslrootcert=/ca.pem": "",
	}
	for dsn, want := range tests {
		m := map[string]string{}
		if dsn != "" {
			m["DATABASE_URL"] = dsn
		}
		c, err := Load(env(m))
		if err != nil {
			t.Fatal(err)
		}
		got := c.DatabaseTLSWarning()
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("DATABASE_URL=%q: warning %q, want one with %q", dsn, got, want)
		}
		if strings.Contains(got, "pw_db_secret") {
			t.Errorf("the warning quotes the password: %s", got)
		}
	}
}
