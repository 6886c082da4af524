// Command providersim serves the Stripe and SendGrid simulators over HTTP, so
// the worker's real stripe-go and sendgrid-go clients can talk to them through
// STRIPE_BASE_URL and SENDGRID_BASE_URL. Each simulator answers its provider's
// API plus a control API under /_sim/ (stats, faults, latency, reset).
//
//	providersim [-stripe-addr :12111] [-sendgrid-addr :12112] [-latency 0s]
//	            [-stripe-rate 0] [-stripe-endpoint-rate 0] [-sendgrid-rate 0]
//
// The rates are requests per second (bursts of as many), answered 429 with
// Retry-After past them: Stripe's per account, global and per endpoint,
// SendGrid's per API key; 0 is no limit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simlimit"
	"github.com/effectively/effectively/sim/stripesim"
)

func main() {
	stripeAddr := flag.String("stripe-addr", ":12111", "listen address of the Stripe simulator")
	sendgridAddr := flag.String("sendgrid-addr", ":12112", "listen address of the SendGrid simulator")
	latency := flag.Duration("latency", 0, "latency added to every provider API request")
	maxObjects := flag.Int("max-objects", 0, "objects each simulator keeps (PaymentIntents, Refunds, idempotency keys, recorded mails), the oldest forgotten past it; 0 for the default (1,000,000)")
	var limits limits
	flag.Float64Var(&limits.stripe.Global.PerSecond, "stripe-rate", 0, "Stripe's global rate limit per account, requests per second (Stripe: 100 live, 25 sandbox); 0 for none")
	flag.Float64Var(&limits.stripe.Endpoint.PerSecond, "stripe-endpoint-rate", 0, "Stripe's rate limit per endpoint per account, requests per second (Stripe: 25); 0 for none")
	flag.Float64Var(&limits.sendgrid.PerSecond, "sendgrid-rate", 0, "SendGrid's Mail Send rate limit per API key, requests per second; 0 for none")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger, *stripeAddr, *sendgridAddr, *latency, *maxObjects, limits); err != nil {
		logger.Error("providersim stopped", "error", err.Error())
		os.Exit(1)
	}
}

// limits are the simulators' rate limits.
type limits struct {
	stripe   stripesim.RateLimits
	sendgrid simlimit.Rate
}

func run(ctx context.Context, logger *slog.Logger, stripeAddr, sendgridAddr string, latency time.Duration, maxObjects int, lim limits) error {
	servers := []struct {
		name, addr string
		h          http.Handler
	}{
		{"stripe", stripeAddr, stripesim.New(stripesim.Options{Latency: latency, Logger: logger.With("sim", "stripe"), MaxObjects: maxObjects, MaxIdempotencyKeys: maxObjects, RateLimits: lim.stripe})},
		{"sendgrid", sendgridAddr, sendgridsim.New(sendgridsim.Options{Latency: latency, Logger: logger.With("sim", "sendgrid"), MaxMessages: maxObjects, RateLimit: lim.sendgrid})},
	}
	errc := make(chan error, len(servers))
	var running []*http.Server
	for _, s := range servers {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
		if err != nil {
			return fmt.Errorf("%s simulator: %w", s.name, err)
		}
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
		running = append(running, srv)
		logger.Info("simulator listening", "sim", s.name, "addr", ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, srv := range running {
		_ = srv.Shutdown(shutdownCtx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
