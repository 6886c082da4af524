package temporalclient

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

func TestCompression(t *testing.T) {
	const gzip, none = "gzip", "none"
	name := func(c client.GrpcCompression) string {
		switch c.(type) {
		case *client.GrpcCompressionGzip:
			return gzip
		case *client.GrpcCompressionNone:
			return none
		}
		return "unknown"
	}
	for _, tc := range []struct {
		value, hostPort, want string
	}{
		// auto (and unset) decide by the address.
		{"", "", none}, // the SDK's default, localhost:7233
		{"", "localhost:7233", none},
		{"auto", "127.0.0.1:7233", none},
		{"auto", "temporal.example.com:7233", gzip},
		{"auto", "my-ns.a1b2c.tmprl.cloud:7233", gzip},
		{"auto", "203.0.113.7:7233", gzip},
		{"auto", "10.0.0.5:7233", none},
		// An explicit value wins over the address.
		{"gzip", "127.0.0.1:7233", gzip},
		{"none", "temporal.example.com:7233", none},
	} {
		c, err := Compression(tc.value, tc.hostPort)
		if err != nil {
			t.Errorf("Compression(%q, %q): %v", tc.value, tc.hostPort, err)
			continue
		}
		if got := name(c); got != tc.want {
			t.Errorf("Compression(%q, %q) = %s, want %s", tc.value, tc.hostPort, got, tc.want)
		}
	}
	if _, err := Compression("zstd", "127.0.0.1:7233"); err == nil || !strings.Contains(err.Error(), EnvCompression) {
		t.Errorf("zstd: err = %v, want one naming %s", err, EnvCompression)
	}
}

func TestLocalAddress(t *testing.T) {
	for _, tc := range []struct {
		hostPort string
		local    bool
	}{
		{"", true}, // client.DefaultHostPort
		{"localhost:7233", true},
		{"LocalHost:7233", true},
		{"localhost.:7233", true},
		{"localhost", true},
		{"127.0.0.1:7233", true},
		{"127.1.2.3:7233", true},
		{"[::1]:7233", true},
		{"::1", true},
		{"[::ffff:127.0.0.1]:7233", true},
		{"10.1.2.3:7233", true},
		{"172.16.0.1:7233", true},
		{"172.31.255.255:7233", true},
		{"192.168.1.10:7233", true},
		{"[fd12:3456::1]:7233", true},
		{"[fc00::1]:7233", true},
		{"169.254.10.1:7233", true},
		{"[fe80::1%eth0]:7233", true},
		// Public addresses, and any DNS name but localhost.
		{"172.32.0.1:7233", false},
		{"11.0.0.1:7233", false},
		{"8.8.8.8:7233", false},
		{"[2001:db8::1]:7233", false},
		{"temporal:7233", false},
		{"temporal-frontend.svc.cluster.local:7233", false},
		{"localhost.example.com:7233", false},
		{"my-ns.a1b2c.tmprl.cloud:7233", false},
		{"0.0.0.0:7233", false},
	} {
		if got := LocalAddress(tc.hostPort); got != tc.local {
			t.Errorf("LocalAddress(%q) = %v, want %v", tc.hostPort, got, tc.local)
		}
	}
}
