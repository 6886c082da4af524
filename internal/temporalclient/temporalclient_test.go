package temporalclient

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

func TestCompression(t *testing.T) {
	env := func(v string, set bool) func(string) (string, bool) {
		return func(name string) (string, bool) {
			if name == EnvCompression && set {
				return v, true
			}
			return "", false
		}
	}
	if c, err := compression(env("", false)); err != nil {
		t.Fatal(err)
	} else if _, ok := c.(*client.GrpcCompressionGzip); !ok {
		t.Errorf("unset: %T, want gzip (the SDK's default)", c)
	}
	if c, err := compression(env("none", true)); err != nil {
		t.Fatal(err)
	} else if _, ok := c.(*client.GrpcCompressionNone); !ok {
		t.Errorf("none: %T", c)
	}
	if _, err := compression(env("zstd", true)); err == nil || !strings.Contains(err.Error(), EnvCompression) {
		t.Errorf("zstd: err = %v, want one naming %s", err, EnvCompression)
	}
}
