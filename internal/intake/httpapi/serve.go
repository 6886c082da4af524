package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/effectively/effectively/internal/leaf/listener"
)

// Limits bounds the API's listener: a request may wait up to MaxWait for
// its outcome, and a thousand waiters may hold a connection each.
func (a *API) Limits() listener.Limits {
	return listener.Limits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      a.cfg.MaxWait + recordTimeout + 5*time.Second,
		MaxConns:          4096,
	}
}

// Serve serves the API on Addr until ctx ends, over TLS when a certificate
// is set, requiring a client certificate when a client CA is set. Ready
// answers nil while it listens.
func (a *API) Serve(ctx context.Context) error {
	tlsCfg, err := a.tlsConfig()
	if err != nil {
		return err
	}
	ln, err := listener.Listen(ctx, "api endpoint", a.cfg.Addr)
	if err != nil {
		return err
	}
	return a.serveOn(ctx, ln, tlsCfg)
}

// ServeOn is Serve on a listener already bound (tests, the bench).
func (a *API) ServeOn(ctx context.Context, ln net.Listener) error {
	tlsCfg, err := a.tlsConfig()
	if err != nil {
		return err
	}
	return a.serveOn(ctx, ln, tlsCfg)
}

func (a *API) serveOn(ctx context.Context, ln net.Listener, tlsCfg *tls.Config) error {
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	a.serving.Store(true)
	defer a.serving.Store(false)
	defer context.AfterFunc(ctx, a.stopWaiters)()
	return listener.Serve(ctx, "api endpoint", ln, a.h, a.Limits(), a.cfg.Logger)
}

// Ready is the /readyz check of the API listener.
func (a *API) Ready(context.Context) error {
	if !a.serving.Load() {
		return errors.New("the API listener is not serving")
	}
	return nil
}

func (a *API) tlsConfig() (*tls.Config, error) {
	if a.cfg.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(a.cfg.TLSCertFile, a.cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("api tls: %w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if a.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(a.cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("api client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("api client CA %s: no PEM certificate", a.cfg.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}
