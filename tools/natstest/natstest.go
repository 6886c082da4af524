// Package natstest runs a real nats-server of a test's own, with the
// configuration the test writes (TLS, users, tokens, nkeys), on a free
// loopback port, and makes the certificates and nkeys such a server needs.
// The machine's shared server on 4222 is left alone. A missing nats-server
// binary fails the test: it is never skipped.
package natstest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/effectively/effectively/tools/freeport"
)

// DefaultBinary is where Debian's nats-server package installs the server.
const DefaultBinary = "/usr/sbin/nats-server"

// Binary returns the nats-server to run: NATS_SERVER_BIN when the test's
// environment sets it, else nats-server on PATH, else DefaultBinary. It
// fails the test when none exists.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("NATS_SERVER_BIN"); b != "" {
		return b
	}
	if b, err := exec.LookPath("nats-server"); err == nil {
		return b
	}
	if _, err := os.Stat(DefaultBinary); err == nil {
		return DefaultBinary
	}
	t.Fatalf("natstest: this test runs its own nats-server and found none (NATS_SERVER_BIN, PATH, %s): install Debian's nats-server package (.ci/run does)", DefaultBinary)
	return ""
}

// Server is a running nats-server.
type Server struct {
	// Port is the client port on 127.0.0.1.
	Port int
	// Name is the server_name StartCluster gave it ("" from Start).
	Name string
	// Dir holds the configuration, the JetStream store and the log.
	Dir  string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// URL is the server's address with the given scheme (nats or tls), on host
// (127.0.0.1 or localhost).
func (s *Server) URL(scheme, host string) string {
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(s.Port))
}

// Log returns what the server has logged so far.
func (s *Server) Log() string { return s.log.String() }

// Reload replaces the server's configuration with conf (as Start takes it)
// and has the server re-read it (SIGHUP).
func (s *Server) Reload(t testing.TB, conf string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir, "nats.conf"), []byte(s.fullConfig(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("natstest: reload: %v", err)
	}
}

// Start writes conf (the server configuration without the listen address,
// which Start adds; it may use {{DIR}} for the server's directory) and runs
// nats-server with it until the test ends. JetStream is on, stored in the
// server's directory.
func Start(t testing.TB, conf string) *Server {
	t.Helper()
	return start(t, freeport.Ports(t, 1)[0], conf)
}

// start is Start on the given client port.
func start(t testing.TB, port int, conf string) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{Port: port, Dir: dir, log: &syncBuffer{}}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(s.fullConfig(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered before the first start, so that it runs after every
	// cleanup the test adds later, and also kills a server that never got
	// ready.
	t.Cleanup(s.kill)
	s.run(t)
	return s
}

// StartCluster runs n nats-servers as one JetStream cluster, each with conf
// (as Start takes it), its own server_name (n1, n2, …) and a route to every
// other, on free loopback ports. JetStream answers once the servers have
// elected a meta leader, a few seconds after StartCluster returns.
func StartCluster(t testing.TB, n int, conf string) []*Server {
	t.Helper()
	// The route ports, then the client ports: all different (a port
	// chosen twice made nats-server refuse its routes as duplicates).
	ports := freeport.Ports(t, 2*n)
	routes := make([]string, n)
	for i := range routes {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i])
	}
	servers := make([]*Server, n)
	for i := range servers {
		name := fmt.Sprintf("n%d", i+1)
		servers[i] = start(t, ports[n+i], fmt.Sprintf("server_name: %s\ncluster { name: test, listen: 127.0.0.1:%d, routes: [%s] }\n%s",
			name, ports[i], strings.Join(routes, ", "), conf))
		servers[i].Name = name
	}
	return servers
}

// kill stops the running server, if any, and waits for it.
func (s *Server) kill() {
	if s.cmd == nil || s.done == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart stops the server (SIGTERM, as an operator's restart would) and
// starts it again on the same port, configuration and JetStream store.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.run(t)
}

// Crash kills the server (SIGKILL: no shutdown, nothing flushed by the
// server itself) and starts it again on the same port, configuration and
// JetStream store.
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	s.kill()
	s.run(t)
}

// Kill kills the server (SIGKILL) and leaves it down: a node lost.
func (s *Server) Kill() { s.kill() }

// run starts nats-server with the configuration in s.Dir and waits until it
// is ready. Start's cleanup kills it, after the test's later cleanups (which
// may still use the server: deleting a stream) have run.
func (s *Server) run(t testing.TB) {
	t.Helper()
	bin := Binary(t)
	path := filepath.Join(s.Dir, "nats.conf")
	s.log.Reset()
	cmd := exec.Command(bin, "-c", path) //nolint:noctx // killed by Start's cleanup, after the cleanups that still use it
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.cmd, s.done = nil, nil
		t.Fatalf("natstest: start %s: %v", bin, err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.Log(), "Server is ready") {
		select {
		case <-done:
			full, _ := os.ReadFile(path)
			t.Fatalf("natstest: nats-server exited at start:\n%s\nconfiguration:\n%s", s.Log(), full)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: nats-server not ready after 15s:\n%s", s.Log())
		}
	}
}

// fullConfig is conf with the listen address and the JetStream store.
func (s *Server) fullConfig(conf string) string {
	return fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n%s\n", s.Port, filepath.Join(s.Dir, "js"),
		strings.ReplaceAll(conf, "{{DIR}}", s.Dir))
}

// syncBuffer is a bytes.Buffer safe for the server's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Reset forgets what was written (a restarted server logs anew).
func (b *syncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// PKI is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and localhost and a client certificate, written as PEM files.
type PKI struct {
	// CA is the authority's certificate; ServerCert and ServerKey, and
	// ClientCert and ClientKey, are signed by it.
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCA is a second authority that signed nothing here.
	OtherCA string
	// OtherClientCert and OtherClientKey are a client certificate signed by
	// OtherCA, which a server trusting CA refuses.
	OtherClientCert, OtherClientKey string
}

// NewPKI writes a PKI in a temporary directory.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	p := PKI{}
	ca, caKey := newCA(t, "effectively test CA")
	p.CA = writeCert(t, dir, "ca.pem", ca.Raw)
	p.ServerCert, p.ServerKey = leaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	other, otherKey := newCA(t, "another CA")
	p.OtherCA = writeCert(t, dir, "other-ca.pem", other.Raw)
	p.OtherClientCert, p.OtherClientKey = leaf(t, dir, "other-client", other, otherKey, x509.ExtKeyUsageClientAuth)
	return p
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// leaf writes a certificate for 127.0.0.1 and localhost signed by ca, and its
// key, returning both paths.
func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return writeCert(t, dir, name+".pem", der), keyPath
}

func writeCert(t testing.TB, dir, name string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Nkey is a user nkey: Public goes in the server's configuration, SeedFile
// is the client's.
type Nkey struct {
	Public, SeedFile string
}

// NewNkey makes a user nkey and writes its seed to a file.
func NewNkey(t testing.TB) Nkey {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return Nkey{Public: pub, SeedFile: path}
}

// TLSBlock is a server tls { } block with p's server certificate; verify
// requires and checks client certificates against p.CA.
func TLSBlock(p PKI, verify bool) string {
	return fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: %t\n  timeout: 2\n}\n",
		p.ServerCert, p.ServerKey, p.CA, verify)
}
