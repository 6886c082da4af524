package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DatabaseTLSWarning returns a warning when DATABASE_URL reaches a host
// beyond loopback with an sslmode that may send the password and the data in
// the clear (disable, allow, prefer, or none given, which means prefer), and
// "" otherwise. The worker logs it at start. It names the host and the mode,
// never the URL, which may hold a password.
func (c Config) DatabaseTLSWarning() string {
	hosts, mode := databaseHostsAndSSLMode(c.DatabaseURL)
	switch mode {
	case "disable", "allow", "prefer":
	default:
		return ""
	}
	for _, h := range hosts {
		if !loopbackOrSocket(h) {
			return fmt.Sprintf("DATABASE_URL reaches %s with sslmode=%s: the connection may be unencrypted and the server is not verified; use sslmode=verify-full with sslrootcert (docs/configuration.md#postgres-tls)", h, mode)
		}
	}
	return ""
}

// databaseHostsAndSSLMode reads the hosts and the sslmode of a libpq
// connection string, a URL or key=value pairs; the mode defaults to prefer,
// as in libpq and pgx. A host= parameter overrides the URL's hosts.
func databaseHostsAndSSLMode(dsn string) (hosts []string, mode string) {
	mode = "prefer"
	params := map[string]string{}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, ""
		}
		for _, hp := range strings.Split(u.Host, ",") {
			if h, _, err := net.SplitHostPort(hp); err == nil {
				hosts = append(hosts, h)
			} else if hp != "" {
				hosts = append(hosts, strings.Trim(hp, "[]"))
			}
		}
		for k, v := range u.Query() {
			params[k] = v[0]
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			if k, v, ok := strings.Cut(f, "="); ok {
				params[k] = strings.Trim(v, "'")
			}
		}
	}
	if h := params["host"]; h != "" {
		hosts = strings.Split(h, ",")
	}
	if len(hosts) == 0 {
		hosts = []string{"localhost"} // libpq's default: a local socket or localhost
	}
	if m := params["sslmode"]; m != "" {
		mode = m
	}
	return hosts, mode
}

// loopbackOrSocket reports whether a Postgres host stays on this machine: a
// Unix socket directory, localhost or a loopback address.
func loopbackOrSocket(h string) bool {
	if strings.HasPrefix(h, "/") || strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
