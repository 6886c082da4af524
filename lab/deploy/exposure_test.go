package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/config"
)

// dockerfileEnv returns the ENV a stage of the Dockerfile sets (the stage
// named stage, and the stages it is built FROM within the file).
func dockerfileEnv(t *testing.T, stage string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	parents := map[string]string{}
	envs := map[string]map[string]string{}
	var cur string
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && strings.EqualFold(f[0], "FROM") && strings.EqualFold(f[len(f)-2], "AS"):
			cur = f[len(f)-1]
			parents[cur] = f[len(f)-3]
			envs[cur] = map[string]string{}
		case len(f) >= 2 && strings.EqualFold(f[0], "ENV") && cur != "":
			for _, kv := range f[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile stage %s: ENV %q is not KEY=value", cur, kv)
				}
				envs[cur][k] = strings.Trim(v, `"`)
			}
		}
	}
	if _, ok := envs[stage]; !ok {
		t.Fatalf("Dockerfile has no stage %q", stage)
	}
	out := map[string]string{}
	for s := stage; s != ""; s = parents[s] {
		for k, v := range envs[s] {
			if _, set := out[k]; !set {
				out[k] = v
			}
		}
		if _, ok := envs[parents[s]]; !ok {
			break
		}
	}
	return out
}

// validateWorker loads and validates the worker's configuration from env
// plus extra.
func validateWorker(env map[string]string, extra map[string]string) (config.Config, error) {
	all := map[string]string{"STRIPE_API_KEY": "sk_test_x", "SENDGRID_API_KEY": "SG.x"}
	for _, m := range []map[string]string{env, extra} {
		for k, v := range m {
			all[k] = v
		}
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := all[k]; return v, ok })
	if err == nil {
		err = cfg.Validate()
	}
	return cfg, err
}

// publicVariables lists the variables of the listeners cfg binds beyond
// loopback.
func publicVariables(cfg config.Config) []string {
	var out []string
	for _, l := range cfg.PublicListeners() {
		out = append(out, l.Variable)
	}
	slices.Sort(out)
	return out
}

// The codec server and the webhook endpoint bound to every interface, as
// someone might add them to the image's environment.
var (
	publicCodec = map[string]string{
		"EFFECTIVELY_CODEC_SERVER_ADDR": ":8234", "EFFECTIVELY_CODEC_TOKEN": strings.Repeat("t", 16),
		"EFFECTIVELY_CODEC_KEYS": "k1:" + strings.Repeat("A", 43) + "=",
	}
	publicWebhook = map[string]string{"EFFECTIVELY_WEBHOOK_ADDR": ":8082", "STRIPE_WEBHOOK_SECRETS": "whsec_x"}
)

// TestImageOpensOnlyTheHealthPort: the worker image lets the health
// listener bind beyond loopback, and nothing else: a codec server or a
// webhook endpoint set to every interface is refused at start, naming it.
func TestImageOpensOnlyTheHealthPort(t *testing.T) {
	env := dockerfileEnv(t, "worker")
	cfg, err := validateWorker(env, nil)
	if err != nil {
		t.Fatalf("the image's own environment is refused: %v", err)
	}
	if got := publicVariables(cfg); !slices.Equal(got, []string{"EFFECTIVELY_HEALTH_ADDR"}) {
		t.Errorf("the image binds %v beyond loopback, want only EFFECTIVELY_HEALTH_ADDR", got)
	}
	for name, extra := range map[string]map[string]string{"codec server": publicCodec, "webhook endpoint": publicWebhook} {
		if _, err := validateWorker(env, extra); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("the image with the %s on every interface: err = %v, want it refused naming the %s", name, err, name)
		}
	}
}

// TestComposeOpensOnlyHealthAndCodec: the compose worker binds the health
// listener (for Prometheus) and the codec server (published on the host's
// loopback) beyond loopback, and would refuse a webhook endpoint on every
// interface.
func TestComposeOpensOnlyHealthAndCodec(t *testing.T) {
	env := map[string]string{}
	for k, v := range load(t).Services["worker"].Environment {
		if v != nil {
			env[k] = *v
		}
	}
	cfg, err := validateWorker(env, nil)
	if err != nil {
		t.Fatalf("the compose worker's environment is refused: %v", err)
	}
	if got, want := publicVariables(cfg), []string{"EFFECTIVELY_CODEC_SERVER_ADDR", "EFFECTIVELY_HEALTH_ADDR"}; !slices.Equal(got, want) {
		t.Errorf("the compose worker binds %v beyond loopback, want %v", got, want)
	}
	if _, err := validateWorker(env, publicWebhook); err == nil || !strings.Contains(err.Error(), "webhook endpoint") {
		t.Errorf("compose worker with the webhook endpoint on every interface: err = %v, want it refused", err)
	}
}
