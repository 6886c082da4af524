package temporalclient

import (
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

func TestCompression(t *testing.T) {
	if c, err := Compression(""); err != nil {
		t.Fatal(err)
	} else if _, ok := c.(*client.GrpcCompressionGzip); !ok {
		t.Errorf("unset: %T, want gzip (the SDK's default)", c)
	}
	if c, err := Compression("none"); err != nil {
		t.Fatal(err)
	} else if _, ok := c.(*client.GrpcCompressionNone); !ok {
		t.Errorf("none: %T", c)
	}
	if _, err := Compression("zstd"); err == nil || !strings.Contains(err.Error(), EnvCompression) {
		t.Errorf("zstd: err = %v, want one naming %s", err, EnvCompression)
	}
}
