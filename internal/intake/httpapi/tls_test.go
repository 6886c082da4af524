package httpapi_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/tools/testenv"
)

// certs is a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, written as PEM files.
type certs struct {
	dir                string
	caPool             *x509.CertPool
	client             tls.Certificate
	serverCert, server string
}

func makeCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, x509.ExtKeyUsageServerAuth)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	cliDER, cliKey := leaf(3, x509.ExtKeyUsageClientAuth)
	c := certs{dir: dir, caPool: x509.NewCertPool(), client: tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey},
		serverCert: write("server.pem", "CERTIFICATE", srvDER), server: write("server-key.pem", "EC PRIVATE KEY", srvKeyDER)}
	c.caPool.AddCert(ca)
	return c
}

// TestMutualTLSAndRequestLog: with a client CA the API refuses a client
// without a certificate signed by it, and still wants the token from one
// with. The request log names route, status, token and message ID, never
// the body or the customer's data.
func TestMutualTLSAndRequestLog(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	c := makeCerts(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "checkout "+httpapi.HashToken(checkoutToken)+" order.placed")
	logs := &syncWriter{w: &bytes.Buffer{}}
	api, err := httpapi.New(s.Intake, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: tokens,
		TLSCertFile: c.serverCert, TLSKeyFile: c.server, ClientCAFile: filepath.Join(c.dir, "ca.pem"),
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeAPI(t, api)
	url := "https://" + addr + "/v1/messages"
	client := func(withCert bool) *http.Client {
		cfg := &tls.Config{RootCAs: c.caPool, MinVersion: tls.VersionTLS12}
		if withCert {
			cfg.Certificates = []tls.Certificate{c.client}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}
	}
	req := func(token string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(order("evt_tls1", 9101, 1234)))
		r.Header.Set("Idempotency-Key", "evt_tls1")
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	if resp, err := client(false).Do(req(checkoutToken)); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	}
	resp, err := client(true).Do(req(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a certificate without a token: %d, want 401", resp.StatusCode)
	}
	resp, err = client(true).Do(req(checkoutToken))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("certificate and token: %d, want 202", resp.StatusCode)
	}
	// The line is written once the answer is sent.
	testenv.Eventually(t, 5*time.Second, "the request's log line", func() bool { return bytes.Contains([]byte(logs.String()), []byte(`"status":202`)) })
	out := logs.String()
	for _, want := range []string{`"msg":"api request"`, `"route":"POST /v1/messages"`, `"status":202`, `"token":"checkout"`, `"message_id":"evt_tls1"`} {
		if !bytes.Contains([]byte(out), []byte(want)) {
			t.Errorf("request log lacks %s:\n%s", want, out)
		}
	}
	for _, never := range []string{"ada@example.com", "pm_card_visa", checkoutToken, "1234"} {
		if bytes.Contains([]byte(out), []byte(never)) {
			t.Errorf("request log carries %q:\n%s", never, out)
		}
	}
}

// syncWriter serialises writes to w: handlers log from many goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
