// Command worker runs effectively's Temporal worker: it polls the task queue,
// runs the OrderPlaced workflow and its activities (Stripe, SendGrid,
// Postgres), and serves GET /healthz.
//
// Configuration comes from the environment; see the README's Configuration
// section. Exit codes: 0 after a clean shutdown (SIGINT or SIGTERM), 1 when
// the worker cannot start or stops on an error, 2 for bad configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/temporalclient"
	"github.com/effectively/effectively/workflows"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := config.FromEnv()
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("bad configuration", "error", err.Error())
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("worker stopped", "error", err.Error())
		return 1
	}
	logger.Info("worker stopped cleanly")
	return 0
}

// serve builds every dependency once and runs the worker until ctx ends.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	logger.Info("starting worker", "config", cfg)
	wfs, err := workflows.New(cfg.Workflows)
	if err != nil {
		return err
	}
	pool, err := store.Open(ctx, cfg.DatabaseURL, store.PoolConfig{})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	payments, err := payment.New(cfg.Stripe)
	if err != nil {
		return fmt.Errorf("stripe client: %w", err)
	}
	mailer, err := email.New(cfg.Email)
	if err != nil {
		return fmt.Errorf("sendgrid client: %w", err)
	}
	tc, namespace, err := temporalclient.Dial(ctx, logger)
	if err != nil {
		return err
	}
	defer tc.Close()
	// Operators find a message's workflow by these attributes; starts that
	// set them fail while they are unregistered.
	if err := temporalclient.EnsureSearchAttributes(ctx, tc, namespace, workflows.SearchAttributeDefs()); err != nil {
		logger.Warn("search attributes", "error", err.Error())
	}

	w := worker.New(tc, cfg.TaskQueue, worker.Options{})
	wfs.Register(w)
	w.RegisterActivity(&activities.Activities{
		Store:       store.New(pool),
		Payments:    payments,
		Mailer:      mailer,
		EmailPolicy: cfg.EmailPolicy,
	})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer w.Stop()
	logger.Info("worker polling", "task_queue", cfg.TaskQueue)

	if cfg.HealthAddr != "" {
		return serveHealth(ctx, cfg.HealthAddr, logger)
	}
	<-ctx.Done()
	return nil
}

// serveHealth answers GET /healthz until ctx ends.
func serveHealth(ctx context.Context, addr string, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health endpoint %s: %w", addr, err)
	}
	logger.Info("health endpoint listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("health endpoint: %w", err)
	}
}
