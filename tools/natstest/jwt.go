package natstest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// Decentralized is a server in operator (JWT) mode with one account and one
// user in it: Conf goes into Start, CredsFile is the user's creds file as
// `nsc generate creds` writes it. The JWTs are made here, signed with nkeys,
// so that the tests need neither nsc nor the jwt library.
type Decentralized struct {
	Conf, CredsFile string
}

// NewDecentralized makes an operator, an account and a user, each with a
// JWT signed by the one above it.
func NewDecentralized(t testing.TB) Decentralized {
	t.Helper()
	dir := t.TempDir()
	op, opPub := keyPair(t, nkeys.CreateOperator)
	acc, accPub := keyPair(t, nkeys.CreateAccount)
	_, sysPub := keyPair(t, nkeys.CreateAccount) // the system account JetStream needs
	usr, usrPub := keyPair(t, nkeys.CreateUser)
	unlimited := map[string]any{"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1}
	opJWT := signJWT(t, op, opPub, "test operator", map[string]any{"type": "operator", "version": 2})
	accJWT := signJWT(t, op, accPub, "test account", map[string]any{"type": "account", "version": 2, "limits": unlimited})
	sysJWT := signJWT(t, op, sysPub, "SYS", map[string]any{"type": "account", "version": 2, "limits": unlimited})
	usrJWT := signJWT(t, acc, usrPub, "test user", map[string]any{"type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1})
	seed, err := usr.Seed()
	if err != nil {
		t.Fatal(err)
	}
	opFile := filepath.Join(dir, "operator.jwt")
	if err := os.WriteFile(opFile, []byte(opJWT), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := fmt.Sprintf("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"+
		"************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\n\n"+
		"-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n", usrJWT, seed)
	credsFile := filepath.Join(dir, "user.creds")
	if err := os.WriteFile(credsFile, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		opFile, sysPub, accPub, accJWT, sysPub, sysJWT)
	return Decentralized{Conf: conf, CredsFile: credsFile}
}

func keyPair(t testing.TB, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, pub
}

// signJWT returns a NATS JWT for subject with the given nats claims, issued
// and signed by issuer.
func signJWT(t testing.TB, issuer nkeys.KeyPair, subject, name string, natsClaims map[string]any) string {
	t.Helper()
	iss, err := issuer.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		t.Fatal(err)
	}
	claims, err := json.Marshal(map[string]any{
		"jti": base64.RawURLEncoding.EncodeToString(jti), "iat": time.Now().Add(-time.Minute).Unix(),
		"iss": iss, "sub": subject, "name": name, "nats": natsClaims,
	})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + enc.EncodeToString(claims)
	sig, err := issuer.Sign([]byte(signing))
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + enc.EncodeToString(sig)
}
