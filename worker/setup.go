package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/workflows"
)

// setup prepares a deployment without running anything: it makes every
// check and registration the worker makes at start (migrations, the key
// namespace, the search attributes, the retention against the redelivery
// horizon of the namespace and the broker) and returns. Unlike a start, a
// search attribute that is still missing afterwards (no operator rights)
// is an error: on Temporal Cloud, create them in the namespace first.
// Running it again changes nothing.
func setup(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	d, err := buildDeps(ctx, cfg, logger)
	defer d.close()
	if err != nil {
		return err
	}
	keys := workflows.SearchAttributeKeys()
	missing, err := temporalclient.MissingSearchAttributes(ctx, d.tc, d.namespace, keys)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, k := range missing {
			names[i] = fmt.Sprintf("%s (%s)", k.GetName(), k.GetValueType())
		}
		return fmt.Errorf("namespace %s: search attributes %v are not registered and could not be added: register them with operator rights (temporal operator search-attribute create, or the Cloud UI)", d.namespace, names)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.GetName()
	}
	logger.Info("namespace is ready", "namespace", d.namespace, "search_attributes", names, "schema_version", store.SchemaVersion())
	return nil
}
