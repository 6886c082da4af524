package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

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
