package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/config"
)

// TestWarnPublicListeners: with the opt-in, each listener beyond loopback
// is named at start, with its address; one on loopback is not.
func TestWarnPublicListeners(t *testing.T) {
	env := map[string]string{
		"STRIPE_API_KEY": "sk_test_x", "SENDGRID_API_KEY": "SG.x",
		"EFFECTIVELY_HEALTH_ADDR": "0.0.0.0:8081", "EFFECTIVELY_ALLOW_PUBLIC_LISTENERS": "true",
		"EFFECTIVELY_PPROF_ADDR": "127.0.0.1:6060",
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	warnPublicListeners(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
	out := buf.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "variable=EFFECTIVELY_HEALTH_ADDR") ||
		!strings.Contains(out, "addr=0.0.0.0:8081") || strings.Contains(out, "6060") {
		t.Fatalf("want one warning naming EFFECTIVELY_HEALTH_ADDR and 0.0.0.0:8081, got:\n%s", out)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// startListener runs serve on a free address until the test ends and
// returns the address once it accepts connections.
func startListener(t *testing.T, serve func(ctx context.Context, addr string) error) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listener on %s: %v", addr, err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("listener on %s never accepted: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workerListeners are the worker's listeners as serve starts them.
func workerListeners() map[string]func(ctx context.Context, addr string) error {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	return map[string]func(ctx context.Context, addr string) error{
		"health": func(ctx context.Context, addr string) error {
			return serveHealth(ctx, addr, health.New(0), prometheus.NewRegistry(), logger)
		},
		"webhook": func(ctx context.Context, addr string) error { return serveWebhooks(ctx, addr, echo, logger) },
		"pprof":   func(ctx context.Context, addr string) error { return servePprof(ctx, addr, logger) },
	}
}

// TestListenersCutASlowBody: a client that sends its headers and then
// trickles the body must lose its connection within the listener's read
// timeout (10 s here), instead of holding a goroutine and a buffer for as
// long as it likes.
func TestListenersCutASlowBody(t *testing.T) {
	for name, serve := range workerListeners() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := startListener(t, serve)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			path := map[string]string{"health": "/livez", "webhook": "/webhooks/stripe", "pprof": "/debug/pprof/"}[name]
			if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx", path); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() { // one byte a second, for ever
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
						if _, err := c.Write([]byte("x")); err != nil {
							return
						}
					}
				}
			}()
			began := time.Now()
			_ = c.SetReadDeadline(began.Add(15 * time.Second))
			_, err = io.Copy(io.Discard, c) // EOF, or a reset when the server closes on unread bytes
			var ne net.Error
			if took := time.Since(began); (errors.As(err, &ne) && ne.Timeout()) || took > 13*time.Second {
				t.Errorf("%s: a client trickling its body kept the connection %s (read: %v); want it cut within the read timeout", name, took.Round(time.Second), err)
			}
		})
	}
}

// TestWebhookListenerLimitsConnections: slow clients holding the webhook
// endpoint's connection limit (256) open keep a further client waiting,
// rather than each costing the process a goroutine.
func TestWebhookListenerLimitsConnections(t *testing.T) {
	addr := startListener(t, workerListeners()["webhook"])
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			_ = c.Close()
		}
	}()
	for range 256 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
		_, _ = fmt.Fprint(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n") // headers never end
	}
	cl := &http.Client{Timeout: time.Second}
	if resp, err := cl.Post("http://"+addr+"/webhooks/stripe", "application/json", strings.NewReader("{}")); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("with 256 slow connections open, a 257th was served (%s); want it held until one closes", resp.Status)
	}
	for _, c := range slow {
		_ = c.Close()
	}
	slow = nil
	cl.Timeout = 5 * time.Second
	resp, err := cl.Post("http://"+addr+"/webhooks/stripe", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("after the slow connections closed: %v", err)
	}
	_ = resp.Body.Close()
}

// TestWebhookListenerLimitsRate: past its rate (100/s, bursts of 200) the
// webhook endpoint answers 429 with Retry-After, which the providers retry.
func TestWebhookListenerLimitsRate(t *testing.T) {
	addr := startListener(t, workerListeners()["webhook"])
	cl := &http.Client{Timeout: 5 * time.Second}
	limited := 0
	for range 400 {
		resp, err := cl.Post("http://"+addr+"/webhooks/stripe", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
			limited++
		}
	}
	if limited == 0 {
		t.Errorf("400 requests at once: none answered 429 with Retry-After; want the rate limited")
	}
}
