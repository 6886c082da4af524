package config

import (
	"strings"
	"testing"
	"time"
)

func TestAPIIsOffAndClosedByDefault(t *testing.T) {
	c, err := validate(t, base(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.API.Enabled() {
		t.Fatal("the API listens by default")
	}
	for _, tc := range []struct {
		vals map[string]string
		want string
	}{
		{map[string]string{"EFFECTIVELY_API_ADDR": "127.0.0.1:8083"}, "EFFECTIVELY_API_TOKENS_FILE: http intake: TokensFile"},
		{map[string]string{"EFFECTIVELY_API_ADDR": "0.0.0.0:8083", "EFFECTIVELY_API_TOKENS_FILE": "/t"}, "beyond loopback"},
		{map[string]string{"EFFECTIVELY_API_ADDR": "127.0.0.1:8083", "EFFECTIVELY_API_TOKENS_FILE": "/t", "EFFECTIVELY_API_CLIENT_CA_FILE": "/ca"}, "EFFECTIVELY_API_CLIENT_CA_FILE"},
		{map[string]string{"EFFECTIVELY_API_ADDR": "127.0.0.1:8083", "EFFECTIVELY_API_TOKENS_FILE": "/t", "EFFECTIVELY_API_TOKEN_RATE": "0"}, "EFFECTIVELY_API_TOKEN_RATE"},
		{map[string]string{"EFFECTIVELY_API_ADDR": "127.0.0.1:8083", "EFFECTIVELY_API_TOKENS_FILE": "/t", "EFFECTIVELY_API_MAX_WAIT": "10m"}, "EFFECTIVELY_API_MAX_WAIT"},
	} {
		if _, err := validate(t, base(tc.vals)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.vals, err, tc.want)
		}
	}
	c, err = validate(t, base(map[string]string{"EFFECTIVELY_API_ADDR": "0.0.0.0:8083", "EFFECTIVELY_API_TOKENS_FILE": "/t",
		"EFFECTIVELY_PUBLIC_LISTENERS": "api", "EFFECTIVELY_API_TOKEN_RATE": "7", "EFFECTIVELY_API_MAX_WAIT": "12s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.API.TokenRate != 7 || c.API.MaxWait != 12*time.Second || c.API.TokensFile != "/t" {
		t.Fatalf("API config %+v", c.API)
	}
}
