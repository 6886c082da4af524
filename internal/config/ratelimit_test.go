package config

import (
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
)

func TestParseRate(t *testing.T) {
	for v, want := range map[string]ratelimit.Rate{
		"80": {PerSecond: 80, Burst: 80}, "0": {Burst: 1}, "0.5": {PerSecond: 0.5, Burst: 1}, "20, 40": {PerSecond: 20, Burst: 40},
	} {
		if got, err := parseRate(v); err != nil || got != want {
			t.Errorf("parseRate(%q) = %+v, %v; want %+v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "fast", "-1", "20,", "20,0", "20,x"} {
		if _, err := parseRate(v); err == nil || !strings.Contains(err.Error(), "want") && !strings.Contains(err.Error(), "burst") {
			t.Errorf("parseRate(%q) = %v, want an error saying what is wanted", v, err)
		}
	}
}
