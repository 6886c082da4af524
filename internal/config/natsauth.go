package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The variables of NATSAuth.
const (
	EnvNATSUser         = "NATS_USER"
	EnvNATSPassword     = "NATS_PASSWORD"
	EnvNATSPasswordFile = "NATS_PASSWORD_FILE"
	EnvNATSToken        = "NATS_TOKEN"
	EnvNATSTokenFile    = "NATS_TOKEN_FILE" //nolint:gosec // G101: a variable's name, not a credential
	EnvNATSNkeySeedFile = "NATS_NKEY_SEED_FILE"
	EnvNATSCredsFile    = "NATS_CREDS_FILE" //nolint:gosec // G101: a variable's name, not a credential
	EnvNATSTLSCAFile    = "NATS_TLS_CA_FILE"
	EnvNATSTLSCertFile  = "NATS_TLS_CERT_FILE"
	EnvNATSTLSKeyFile   = "NATS_TLS_KEY_FILE"
)

// NATSAuth is how the worker and the starter prove who they are to NATS and
// how they check the server: at most one credential (a user and password, a
// token, an nkey seed or a creds file; or none, or the user information of
// NATS_URL) and, apart from it, TLS. Every file is read at load, so that a
// missing or malformed one stops the start; all but the nkey seed's public
// key are read again at each connection, so that a rotated file is picked up
// without a restart (see Options).
type NATSAuth struct {
	// User and Password (NATS_USER; NATS_PASSWORD, or the content of
	// PasswordFile, NATS_PASSWORD_FILE).
	User, Password, PasswordFile string
	// Token (NATS_TOKEN, or the content of TokenFile, NATS_TOKEN_FILE).
	Token, TokenFile string
	// NkeySeedFile holds a user nkey seed, SU… (NATS_NKEY_SEED_FILE): the
	// client signs the server's nonce with it.
	NkeySeedFile string
	// CredsFile is a decentralized-auth user creds file, a user JWT and its
	// nkey seed (NATS_CREDS_FILE).
	CredsFile string
	// CAFile verifies the server's certificate instead of the system roots
	// (NATS_TLS_CA_FILE); CertFile and KeyFile are the client certificate
	// for mutual TLS (NATS_TLS_CERT_FILE, NATS_TLS_KEY_FILE). Either one
	// requires TLS, whatever NATS_URL's scheme.
	CAFile, CertFile, KeyFile string
}

// Method names the credential in use, for logs: user, token, nkey, creds or
// none (no credential, or the one in NATS_URL).
func (a NATSAuth) Method() string {
	switch {
	case a.User != "":
		return "user"
	case a.Token != "" || a.TokenFile != "":
		return "token"
	case a.NkeySeedFile != "":
		return "nkey"
	case a.CredsFile != "":
		return "creds"
	}
	return "none"
}

// TLS says how the connection is secured beyond NATS_URL's scheme, for logs.
func (a NATSAuth) TLS() string {
	switch {
	case a.CAFile != "" && a.CertFile != "":
		return "ca+client-cert"
	case a.CAFile != "":
		return "ca"
	case a.CertFile != "":
		return "client-cert"
	}
	return "url"
}

// loadNATSAuth reads the NATS credentials and TLS files, refusing two
// credentials at once, half a pair, and a file that does not read or parse.
// No error quotes a file's content or a secret value.
func loadNATSAuth(get func(name, def string) string, natsURL string) (NATSAuth, []error) {
	a := NATSAuth{
		User: get(EnvNATSUser, ""), Password: get(EnvNATSPassword, ""), PasswordFile: get(EnvNATSPasswordFile, ""),
		Token: get(EnvNATSToken, ""), TokenFile: get(EnvNATSTokenFile, ""),
		NkeySeedFile: get(EnvNATSNkeySeedFile, ""), CredsFile: get(EnvNATSCredsFile, ""),
		CAFile: get(EnvNATSTLSCAFile, ""), CertFile: get(EnvNATSTLSCertFile, ""), KeyFile: get(EnvNATSTLSKeyFile, ""),
	}
	var errs []error
	pair := func(a, b string, aSet, bSet bool, what string) {
		if aSet && bSet {
			errs = append(errs, fmt.Errorf("%s and %s are both set: give the %s one way", a, b, what))
		}
	}
	pair(EnvNATSPassword, EnvNATSPasswordFile, a.Password != "", a.PasswordFile != "", "password")
	pair(EnvNATSToken, EnvNATSTokenFile, a.Token != "", a.TokenFile != "", "token")

	// At most one credential.
	var methods []string
	if a.User != "" || a.Password != "" || a.PasswordFile != "" {
		methods = append(methods, EnvNATSUser+"/"+EnvNATSPassword)
		switch {
		case a.User == "":
			errs = append(errs, fmt.Errorf("%s or %s is set without %s", EnvNATSPassword, EnvNATSPasswordFile, EnvNATSUser))
		case a.Password == "" && a.PasswordFile == "":
			errs = append(errs, fmt.Errorf("%s is set without %s or %s", EnvNATSUser, EnvNATSPassword, EnvNATSPasswordFile))
		}
	}
	if a.Token != "" || a.TokenFile != "" {
		methods = append(methods, EnvNATSToken)
	}
	if a.NkeySeedFile != "" {
		methods = append(methods, EnvNATSNkeySeedFile)
	}
	if a.CredsFile != "" {
		methods = append(methods, EnvNATSCredsFile)
	}
	if len(methods) > 1 {
		errs = append(errs, fmt.Errorf("NATS credentials: %s are set together; set one of %s/%s, %s, %s or %s",
			strings.Join(methods, " and "), EnvNATSUser, EnvNATSPassword, EnvNATSToken, EnvNATSNkeySeedFile, EnvNATSCredsFile))
	}
	if len(methods) > 0 && urlHasUserInfo(natsURL) {
		// nats.go would send the URL's and drop NATS_USER or NATS_TOKEN
		// without a word; an nkey or a JWT would go along with them.
		errs = append(errs, fmt.Errorf("NATS_URL carries credentials (user@ or user:password@) and %s is set: use one or the other", methods[0]))
	}
	if (a.CertFile != "") != (a.KeyFile != "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: set both for a client certificate, or neither", EnvNATSTLSCertFile, EnvNATSTLSKeyFile))
	}

	// The files, read now so that the start fails rather than the first
	// connection.
	if a.PasswordFile != "" {
		if p, err := readSecretFile(a.PasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvNATSPasswordFile, err))
		} else {
			a.Password = p
		}
	}
	if a.TokenFile != "" {
		if tok, err := readSecretFile(a.TokenFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvNATSTokenFile, err))
		} else {
			a.Token = tok
		}
	}
	if a.NkeySeedFile != "" {
		if err := checkSeedFile(a.NkeySeedFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvNATSNkeySeedFile, err))
		}
	}
	if a.CredsFile != "" {
		if err := checkCredsFile(a.CredsFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvNATSCredsFile, err))
		}
	}
	if a.CAFile != "" {
		if b, err := os.ReadFile(a.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvNATSTLSCAFile, err))
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			errs = append(errs, fmt.Errorf("%s (%s): no PEM certificate in it", EnvNATSTLSCAFile, a.CAFile))
		}
	}
	if a.CertFile != "" && a.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s) and %s (%s): %w", EnvNATSTLSCertFile, a.CertFile, EnvNATSTLSKeyFile, a.KeyFile, err))
		}
	}
	return a, errs
}

// urlHasUserInfo reports whether any URL of a NATS_URL list has a user part.
func urlHasUserInfo(raw string) bool {
	for _, one := range strings.Split(raw, ",") {
		if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// readSecretFile returns a file's content without surrounding white space
// (the newline an editor or `echo` leaves). The errors name the file, never
// what is in it.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// checkSeedFile checks that path holds a user nkey seed.
func checkSeedFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no nkey seed (SU…)", path)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return fmt.Errorf("%s holds no user nkey seed (SU…, as `nk -gen user` writes)", path)
	}
	return nil
}

// checkCredsFile checks that path holds a user JWT and its nkey seed, as
// `nsc generate creds` writes them.
func checkCredsFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if jwt, _ := nkeys.ParseDecoratedJWT(b); jwt == "" || jwt == string(b) || strings.Count(jwt, ".") != 2 {
		return fmt.Errorf("%s holds no user JWT (-----BEGIN NATS USER JWT----- block)", path)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no user nkey seed (-----BEGIN USER NKEY SEED----- block)", path)
	}
	kp.Wipe()
	return nil
}

// Options returns the nats.go options that authenticate and secure a
// connection as configured; both the worker and the starter connect with
// them (Connect). The password and token files are read again at every
// connection attempt, keeping the last value read when a file stops
// reading; nats.go reads the creds and TLS files at every connection and
// the nkey seed file at every signature, its public key once, here.
func (n NATS) Options() ([]nats.Option, error) {
	a := n.Auth
	var opts []nats.Option
	switch {
	case a.PasswordFile != "":
		f := &secretFile{path: a.PasswordFile, last: a.Password}
		opts = append(opts, nats.UserInfoHandler(func() (string, string) { return a.User, f.value() }))
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.TokenFile != "":
		f := &secretFile{path: a.TokenFile, last: a.Token}
		opts = append(opts, nats.TokenHandler(f.value))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.NkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvNATSNkeySeedFile, err)
		}
		opts = append(opts, o)
	case a.CredsFile != "":
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" {
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}

// Connect connects to NATS_URL as name (the connection name the server
// shows) with Options, then extra.
func (n NATS) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	if !n.Enabled() {
		return nil, errors.New("NATS_URL is off")
	}
	opts, err := n.Options()
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, nats.Name(name)), extra...)
	return nats.Connect(n.URL, opts...)
}

// secretFile is a credential file read at every connection attempt, keeping
// the last value that read.
type secretFile struct {
	path string
	mu   sync.Mutex
	last string
}

func (f *secretFile) value() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, err := readSecretFile(f.path); err == nil {
		f.last = v
	}
	return f.last
}
