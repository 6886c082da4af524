package config

import (
	"slices"
	"strings"
)

// GRPCMetaPrefix begins the names of the variables Temporal's envconfig
// turns into gRPC headers (TEMPORAL_GRPC_META_<header>); Names lists the
// family as GRPCMetaPrefix + "*".
const GRPCMetaPrefix = "TEMPORAL_GRPC_META_"

// Names returns, sorted, every environment variable Load reads, Temporal's
// own included: the table of variables. A name ending in * stands for a
// family of variables with that prefix. docs/configuration.md's table is
// generated from the same table, and the deployment check holds the
// worker's environment in docker-compose.yml to them.
func Names() []string {
	names := make([]string, 0, len(variables))
	for _, v := range variables {
		names = append(names, v.name)
	}
	slices.Sort(names)
	return names
}

// Known reports whether name is one of Names, or of a family it lists, or an
// OpenTelemetry variable (OTEL_*, read through OTelLookup).
func Known(name string) bool {
	if strings.HasPrefix(name, "OTEL_") {
		return true // read through OTelLookup by internal/leaf/tracing and the OpenTelemetry SDK
	}
	for _, n := range Names() {
		if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || n == name {
			return true
		}
	}
	return false
}
