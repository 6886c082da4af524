// Package listener serves the worker's HTTP listeners (health and metrics,
// the provider webhooks, pprof, the codec server) with time bounds on every
// connection and, where the internet may reach it, limits on concurrent
// connections and request rate. A slow or hostile client costs a bounded
// goroutine and buffer for a bounded time, never the process.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
)

// Limits bounds one listener. Zero durations take the defaults noted per
// field; zero MaxConns and Rate mean no limit.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included. Default 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request. Default 60s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns is the most connections open at once; more wait to be
	// accepted.
	MaxConns int
	// Rate is the requests per second served; beyond it (and Burst) a
	// request is answered 429 with Retry-After, which the providers retry.
	Rate float64
	// Burst is how many requests may come at once above Rate. Default Rate.
	Burst int
	// ShutdownGrace is how long requests in flight get at shutdown before
	// they are cut. Default 5s.
	ShutdownGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, 5*time.Second)
	def(&l.ReadTimeout, 10*time.Second)
	def(&l.WriteTimeout, 30*time.Second)
	def(&l.IdleTimeout, 60*time.Second)
	def(&l.ShutdownGrace, 5*time.Second)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.Rate > 0 && l.Burst <= 0 {
		l.Burst = max(1, int(l.Rate))
	}
	return l
}

// Health bounds the health and metrics listener: a scrape of /metrics
// writes for at most WriteTimeout.
func Health() Limits { return Limits{}.withDefaults() }

// Webhook bounds the providers' webhook endpoint, the one listener meant to
// be reachable from the internet: a request's body (at most 1 MiB) must
// arrive within 10 s, 256 connections at most, 100 requests/s with bursts
// of 200. Stripe and SendGrid retry a 429 or a cut request.
func Webhook() Limits {
	return Limits{MaxConns: 256, Rate: 100, Burst: 200}.withDefaults()
}

// Pprof bounds the pprof listener: a CPU profile or trace may take up to
// WriteTimeout (2 min; net/http/pprof refuses longer ones).
func Pprof() Limits { return Limits{WriteTimeout: 2 * time.Minute}.withDefaults() }

// Codec bounds the codec server: a UI page decodes a batch of payloads (up
// to 16 MiB) at once.
func Codec() Limits {
	return Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}.withDefaults()
}

// Listen binds addr; name says what it serves, for the errors.
func Listen(ctx context.Context, name, addr string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, addr, err)
	}
	return ln, nil
}

// Serve serves h on ln within lim until ctx ends, then shuts down, giving
// requests in flight lim.ShutdownGrace. A request still running after the
// grace is cut and logged: that is no failure (its sender sees no answer
// and retries), so Serve returns nil. It returns an error only when the
// server itself fails.
func Serve(ctx context.Context, name string, ln net.Listener, h http.Handler, lim Limits, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	lim = lim.withDefaults()
	if lim.Rate > 0 {
		h = rateLimit(h, rate.NewLimiter(rate.Limit(lim.Rate), lim.Burst))
	}
	if lim.MaxConns > 0 {
		ln = netutil.LimitListener(ln, lim.MaxConns)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	addr := ln.Addr().String()
	logger.Info(name+" listening", "addr", addr)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s on %s: %w", name, addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lim.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn(name+" cut requests still running at shutdown", "addr", addr, "grace", lim.ShutdownGrace.String(), "error", err.Error())
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s on %s: %w", name, addr, err)
	}
	logger.Info(name+" stopped", "addr", addr)
	return nil
}

// ListenAndServe is Listen then Serve.
func ListenAndServe(ctx context.Context, name, addr string, h http.Handler, lim Limits, logger *slog.Logger) error {
	ln, err := Listen(ctx, name, addr)
	if err != nil {
		return err
	}
	return Serve(ctx, name, ln, h, lim, logger)
}

// rateLimit answers 429 with Retry-After once lim has no token left.
func rateLimit(next http.Handler, lim *rate.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lim.Allow() {
			w.Header().Set("Retry-After", "1")
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}
