// Package temporalclient connects to Temporal the same way in every binary.
// It reads no environment: internal/config loads the connection through
// Temporal's envconfig (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS_*, TEMPORAL_PROFILE and the temporal.toml
// config file), so a local dev server, a self-hosted cluster and Temporal
// Cloud need no code change, and hands it here as a Config.
package temporalclient

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/leaf/codec"
)

// Config is the connection to Temporal, as internal/config loads it.
type Config struct {
	// Options are the client options from Temporal's envconfig, with the
	// gRPC compression chosen by EnvCompression. Logger, DataConverter and
	// FailureConverter are set by Options.
	Options client.Options
	// Keys encrypt every payload and failure message the client writes
	// (internal/leaf/codec); nil: plaintext. Every process of a deployment needs
	// the same keys.
	Keys *codec.Keyring
	// RequireEncryption makes the codec refuse payloads it did not encrypt
	// (EFFECTIVELY_CODEC_REQUIRE, default false; see
	// codec.RequireEncryption). internal/config refuses it without Keys.
	RequireEncryption bool
}

// Options returns the client options of cfg with logger and, when keys are
// configured, the encrypting data and failure converters.
func Options(cfg Config, logger *slog.Logger) client.Options {
	opts := cfg.Options
	if logger != nil {
		opts.Logger = tlog.NewStructuredLogger(logger)
	}
	if keys := cfg.Keys; keys != nil {
		dc := codec.NewDataConverter(keys, codec.RequireEncryption(cfg.RequireEncryption))
		opts.DataConverter = dc
		opts.FailureConverter = codec.NewFailureConverter(dc)
		if logger != nil {
			logger.Info("payload encryption on", "current_key", keys.CurrentID(), "keys", keys.IDs(),
				"plaintext_refused", cfg.RequireEncryption)
		}
	} else if logger != nil {
		logger.Info("payload encryption off: customer data is stored in plaintext in Temporal history (set " + codec.EnvKeys + ")")
	}
	return opts
}

// EnvCompression names the variable that chooses the gRPC compression of
// requests to Temporal: auto (the default), gzip (the SDK's default) or
// none. gzip saves bandwidth to a remote cluster; none saves the CPU of
// compressing every request and response on both sides (the server answers
// in the request's encoding), which is the better trade-off on a local
// network. auto picks none for a local address (LocalAddress), else gzip.
const EnvCompression = "EFFECTIVELY_GRPC_COMPRESSION"

// Compression parses the value of EnvCompression for a client of the
// frontend at hostPort (TEMPORAL_ADDRESS; "" is the SDK's default,
// localhost:7233). "" and "auto" choose by the address: none when
// LocalAddress(hostPort), gzip otherwise.
func Compression(v, hostPort string) (client.GrpcCompression, error) {
	switch v {
	case "", "auto":
		if LocalAddress(hostPort) {
			return &client.GrpcCompressionNone{}, nil
		}
		return &client.GrpcCompressionGzip{}, nil
	case "gzip":
		return &client.GrpcCompressionGzip{}, nil
	case "none":
		return &client.GrpcCompressionNone{}, nil
	default:
		return nil, fmt.Errorf("%s=%q: use auto, gzip or none", EnvCompression, v)
	}
}

// LocalAddress reports whether hostPort names a server on this machine or
// a private network, by its literal host alone: localhost, a loopback
// address (127.0.0.0/8, ::1), a private one (RFC 1918, fc00::/7) or a
// link-local one (169.254.0.0/16, fe80::/10). "" is the SDK's default,
// localhost. Any other DNS name is not local, whatever it resolves to: the
// decision needs no lookup and cannot change while the process runs, and a
// wrong "not local" only costs the CPU of gzip.
func LocalAddress(hostPort string) bool {
	if hostPort == "" {
		hostPort = client.DefaultHostPort
	}
	host := hostPort
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	return addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast()
}

// Dial connects with the options of cfg and returns the client and its
// namespace. Interceptors (the tracing one, when tracing is on) apply to the
// client and to every worker built on it.
func Dial(ctx context.Context, cfg Config, logger *slog.Logger, interceptors ...interceptor.ClientInterceptor) (client.Client, string, error) {
	return DialWithMetrics(ctx, cfg, logger, nil, interceptors...)
}

// DialWithMetrics is Dial with the SDK's metrics reported to mh (nil: none).
func DialWithMetrics(ctx context.Context, cfg Config, logger *slog.Logger, mh client.MetricsHandler, interceptors ...interceptor.ClientInterceptor) (client.Client, string, error) {
	opts := Options(cfg, logger)
	opts.MetricsHandler = mh
	opts.Interceptors = append(opts.Interceptors, interceptors...)
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = client.DefaultHostPort
		}
		return nil, "", fmt.Errorf("connect to temporal at %s (set TEMPORAL_ADDRESS): %w", addr, err)
	}
	ns := opts.Namespace
	if ns == "" {
		ns = client.DefaultNamespace
	}
	return c, ns, nil
}

// EnsureSearchAttributes registers the attributes of want that are missing.
// An attribute registered under another type is a *TypeConflictError: a
// type cannot be changed in place, so nothing is added. It returns the
// ones still missing when registration is not allowed.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string, want []temporal.SearchAttributeKey) error {
	missing, err := MissingSearchAttributes(ctx, c, namespace, want)
	if err != nil || len(missing) == 0 {
		return err
	}
	if err := AddSearchAttributes(ctx, c, namespace, missing); err != nil {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m.GetName()
		}
		return fmt.Errorf("search attributes %v are not registered in namespace %s and could not be added: %w", names, namespace, err)
	}
	return nil
}

// TypeConflictError reports search attributes registered in a namespace
// under another type than effectively's.
type TypeConflictError struct {
	Namespace string
	// Conflicts maps an attribute's name to its registered and wanted types.
	Conflicts map[string][2]enumspb.IndexedValueType
}

func (e *TypeConflictError) Error() string {
	parts := make([]string, 0, len(e.Conflicts))
	for _, name := range slices.Sorted(maps.Keys(e.Conflicts)) {
		c := e.Conflicts[name]
		parts = append(parts, fmt.Sprintf("%s is registered as %s, effectively needs %s", name, c[0], c[1]))
	}
	return fmt.Sprintf("namespace %s: search attribute %s: a type cannot be changed in place; remove the attribute (temporal operator search-attribute remove) or use another namespace",
		e.Namespace, strings.Join(parts, "; "))
}

// MissingSearchAttributes reports which of want are not registered in the
// client's namespace, or a *TypeConflictError for those registered under
// another type.
func MissingSearchAttributes(ctx context.Context, c client.Client, namespace string, want []temporal.SearchAttributeKey) ([]temporal.SearchAttributeKey, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes: %w", err)
	}
	var missing []temporal.SearchAttributeKey
	conflict := &TypeConflictError{Namespace: namespace, Conflicts: map[string][2]enumspb.IndexedValueType{}}
	for _, k := range want {
		t, ok := resp.GetCustomAttributes()[k.GetName()]
		switch {
		case !ok:
			missing = append(missing, k)
		case t != k.GetValueType():
			conflict.Conflicts[k.GetName()] = [2]enumspb.IndexedValueType{t, k.GetValueType()}
		}
	}
	if len(conflict.Conflicts) > 0 {
		return nil, conflict
	}
	return missing, nil
}

// AddSearchAttributes registers keys in namespace. It needs operator
// rights, which a local server grants and a cloud namespace may not.
func AddSearchAttributes(ctx context.Context, c client.Client, namespace string, keys []temporal.SearchAttributeKey) error {
	m := make(map[string]enumspb.IndexedValueType, len(keys))
	for _, k := range keys {
		m[k.GetName()] = k.GetValueType()
	}
	_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: m})
	if err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}
