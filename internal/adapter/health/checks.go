package health

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
)

// Names of the worker's checks, as /readyz reports them.
const (
	CheckPostgres = "postgres"
	CheckTemporal = "temporal"
	CheckNATS     = "nats"
)

// Postgres checks that the database answers and is migrated to the version
// this binary needs.
func Postgres(st *store.Store) Check {
	return Check{Name: CheckPostgres, Fn: st.CheckReady}
}

// Temporal checks that the Temporal frontend answers a health check.
func Temporal(tc client.Client) Check {
	return Check{Name: CheckTemporal, Fn: func(ctx context.Context) error {
		if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			return fmt.Errorf("temporal health check: %w", err)
		}
		return nil
	}}
}

// NATS checks that the connection to the broker is up (not reconnecting or
// closed).
func NATS(nc *nats.Conn) Check {
	return Check{Name: CheckNATS, Fn: func(context.Context) error {
		if s := nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection is %s", s)
		}
		return nil
	}}
}
