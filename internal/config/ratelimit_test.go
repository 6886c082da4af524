package config

import (
	"strings"
	"testing"
	"time"

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

// TestRouteStartRate: auto paces a route's starts (in total, over the
// workers) at 1.25 times the paid messages per second the limits allow, none without limits; a number is
// taken as it is.
func TestRouteStartRate(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want float64
	}{
		{map[string]string{}, 25}, // the defaults: 20/s an endpoint, 80/s in all, no SendGrid limit
		{map[string]string{"STRIPE_RATE_LIMIT": "30"}, 18.75},
		{map[string]string{"SENDGRID_RATE_LIMIT": "4"}, 5},
		{map[string]string{"STRIPE_RATE_LIMIT": "0", "STRIPE_ENDPOINT_RATE_LIMIT": "0"}, 0},
		{map[string]string{"EFFECTIVELY_START_RATE": "7"}, 7},
		{map[string]string{"EFFECTIVELY_START_RATE": "0"}, 0},
	} {
		cfg, err := Load(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if got := cfg.RouteStartRate(); got != tc.want {
			t.Errorf("%v: RouteStartRate() = %v, want %v", tc.env, got, tc.want)
		}
	}
	if _, err := Load(func(k string) (string, bool) { return "fast", k == "EFFECTIVELY_START_RATE" }); err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_START_RATE") {
		t.Errorf("EFFECTIVELY_START_RATE=fast: %v, want an error naming it", err)
	}
}

// TestStartAhead: the hold defaults to DefaultStartAhead, 0 turns it off,
// and a negative or unreadable value is refused by name.
func TestStartAhead(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultStartAhead, "0": 0, "2s": 2 * time.Second} {
		cfg, err := Load(func(k string) (string, bool) {
			if k != "EFFECTIVELY_START_AHEAD" || v == "" {
				return "", false
			}
			return v, true
		})
		if err != nil || cfg.StartAhead != want {
			t.Errorf("EFFECTIVELY_START_AHEAD=%q: %v, %v; want %v", v, cfg.StartAhead, err, want)
		}
	}
	for _, v := range []string{"-1s", "soon", "2h"} {
		if _, err := Load(func(k string) (string, bool) {
			if k != "EFFECTIVELY_START_AHEAD" {
				return "", false
			}
			return v, true
		}); err == nil || !strings.Contains(err.Error(), "EFFECTIVELY_START_AHEAD") {
			t.Errorf("EFFECTIVELY_START_AHEAD=%s: %v, want an error naming it", v, err)
		}
	}
}
