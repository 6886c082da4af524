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
// own included; a name ending in * stands for a family of variables with
// that prefix. docs/configuration.md documents exactly these (a test
// compares them), and the deployment check holds the worker's environment in
// docker-compose.yml to them.
func Names() []string {
	r := &recorder{read: map[string]bool{}}
	_, _ = LoadEnv(r) // an empty environment: every variable is looked up, none set
	names := make([]string, 0, len(r.read))
	for n := range r.read {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Known reports whether name is one of Names, or of a family it lists.
func Known(name string) bool {
	for _, n := range Names() {
		if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || n == name {
			return true
		}
	}
	return false
}

// recorder is an empty environment that records what is looked up.
type recorder struct {
	read map[string]bool
}

func (r *recorder) LookupEnv(name string) (string, bool) {
	r.read[name] = true
	return "", false
}

func (r *recorder) Environ() []string {
	r.read[GRPCMetaPrefix+"*"] = true
	return nil
}
