package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/retention"
)

// noHorizon is a source whose broker allows copies for ever.
type noHorizon struct{ intake.Source }

func (noHorizon) Name() string { return "unbounded" }
func (noHorizon) Horizon(context.Context) (retention.SourceHorizon, error) {
	return retention.SourceHorizon{}, fmt.Errorf("consumer x: %w", retention.ErrUnbounded)
}
func (noHorizon) Check() health.Check { return health.Check{Name: "source.unbounded"} }

// TestSourceWithoutHorizonIsRefused: the start is refused as bad
// configuration (exit 2), naming the source and why, before Temporal is
// asked anything.
func TestSourceWithoutHorizonIsRefused(t *testing.T) {
	_, err := retentionPolicy(context.Background(), config.Config{}, nil, "default", []intake.Source{noHorizon{}})
	if !errors.Is(err, errBadConfig) || !errors.Is(err, retention.ErrNoHorizon) || !strings.Contains(err.Error(), "source unbounded") {
		t.Fatalf("err = %v; want bad configuration naming the source and its missing horizon", err)
	}
}
