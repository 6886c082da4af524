// Package config reads the worker's and the starter's configuration from the
// environment, applies defaults in one place and validates it, naming the
// variable at fault. Secrets (API keys) are read here and never logged: the
// LogValue method redacts them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/email"
	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/workflows"
)

// Lookup reads one environment variable; os.LookupEnv in production.
type Lookup func(name string) (string, bool)

// Config is everything the worker needs besides the Temporal connection,
// which Temporal's envconfig reads (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE and the config file).
type Config struct {
	// DatabaseURL is the Postgres connection string (DATABASE_URL). Default
	// store.DefaultURL.
	DatabaseURL string
	// TaskQueue is the Temporal task queue (EFFECTIVELY_TASK_QUEUE).
	// Default workflows.DefaultTaskQueue.
	TaskQueue string
	// Stripe configures the Stripe client (STRIPE_API_KEY, STRIPE_BASE_URL).
	Stripe payment.Config
	// Email configures the SendGrid client (SENDGRID_API_KEY,
	// SENDGRID_BASE_URL, EMAIL_FROM default receipts@effectively.local).
	Email email.Config
	// EmailPolicy is at-least-once (default) or at-most-once (EMAIL_POLICY).
	EmailPolicy store.EmailPolicy
	// Workflows holds activity timeouts (PAYMENT_SCHEDULE_TO_CLOSE, …).
	Workflows workflows.Config
	// HealthAddr serves GET /healthz (EFFECTIVELY_HEALTH_ADDR). Default
	// 127.0.0.1:8081; empty string "off" disables it.
	HealthAddr string
	// LogLevel is debug, info (default), warn or error (LOG_LEVEL).
	LogLevel slog.Level
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// Load reads the configuration through env.
func Load(env Lookup) (Config, error) {
	get := func(name, def string) string {
		if v, ok := env(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	var errs []error
	dur := func(name string) time.Duration {
		v := get(name, "")
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: not a duration (use e.g. 20h, 90s): %w", name, v, err))
		}
		return d
	}
	c := Config{
		DatabaseURL: get("DATABASE_URL", store.DefaultURL),
		TaskQueue:   get("EFFECTIVELY_TASK_QUEUE", workflows.DefaultTaskQueue),
		Stripe: payment.Config{
			APIKey:  get("STRIPE_API_KEY", ""),
			BaseURL: get("STRIPE_BASE_URL", ""),
		},
		Email: email.Config{
			APIKey:   get("SENDGRID_API_KEY", ""),
			BaseURL:  get("SENDGRID_BASE_URL", ""),
			From:     get("EMAIL_FROM", "receipts@effectively.local"),
			FromName: get("EMAIL_FROM_NAME", "effectively"),
		},
		EmailPolicy: store.EmailPolicy(get("EMAIL_POLICY", string(store.AtLeastOnce))),
		Workflows: workflows.Config{
			PaymentStartToClose:    dur("PAYMENT_START_TO_CLOSE"),
			PaymentScheduleToClose: dur("PAYMENT_SCHEDULE_TO_CLOSE"),
			EmailStartToClose:      dur("EMAIL_START_TO_CLOSE"),
			EmailScheduleToClose:   dur("EMAIL_SCHEDULE_TO_CLOSE"),
		},
		HealthAddr: get("EFFECTIVELY_HEALTH_ADDR", "127.0.0.1:8081"),
	}
	if c.HealthAddr == "off" {
		c.HealthAddr = ""
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: use debug, info, warn or error", get("LOG_LEVEL", "")))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks what the worker needs, naming the variable at fault.
func (c Config) Validate() error {
	var errs []error
	if c.Stripe.APIKey == "" {
		errs = append(errs, errors.New("STRIPE_API_KEY is not set (use sk_test_… with STRIPE_BASE_URL pointing at the simulator for local runs)"))
	}
	if c.Email.APIKey == "" {
		errs = append(errs, errors.New("SENDGRID_API_KEY is not set"))
	}
	switch c.EmailPolicy {
	case store.AtLeastOnce, store.AtMostOnce:
	default:
		errs = append(errs, fmt.Errorf("EMAIL_POLICY=%q: use %s or %s", c.EmailPolicy, store.AtLeastOnce, store.AtMostOnce))
	}
	if err := c.Workflows.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("activity timeouts (PAYMENT_*/EMAIL_* variables): %w", err))
	}
	return errors.Join(errs...)
}

// LogValue keeps secrets out of logs: keys are reported as set or not.
func (c Config) LogValue() slog.Value {
	set := func(s string) string {
		if s == "" {
			return "unset"
		}
		return "set"
	}
	base := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	return slog.GroupValue(
		slog.String("task_queue", c.TaskQueue),
		slog.String("stripe_base_url", base(c.Stripe.BaseURL, "https://api.stripe.com")),
		slog.String("stripe_api_key", set(c.Stripe.APIKey)),
		slog.String("sendgrid_base_url", base(c.Email.BaseURL, "https://api.sendgrid.com")),
		slog.String("sendgrid_api_key", set(c.Email.APIKey)),
		slog.String("email_policy", string(c.EmailPolicy)),
		slog.String("health_addr", c.HealthAddr),
	)
}
