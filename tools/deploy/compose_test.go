package deploy

import (
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/effectively/effectively/internal/config"
)

// core are the services the stack needs, with the container port each
// must publish (0: none). Other services (monitoring, …) may be added.
var core = map[string]uint32{
	"postgres": 5432, "temporal": 7233, "temporal-setup": 0, "temporal-ui": 8080,
	"nats": 4222, "simulators": 12111, "worker": 8081, "starter": 0,
}

// tools are services that run only on demand (docker compose run).
var tools = []string{"starter"}

// load loads docker-compose.yml as `docker compose` would from the
// repository root, with every profile and no environment: the stack must
// not depend on the caller's shell.
func load(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("effectively", true)
		o.Profiles = []string{"*"}
		o.Interpolate.LookupValue = func(k string) (string, bool) { read = append(read, k); return "", false }
	})
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	if len(read) > 0 {
		t.Errorf("docker-compose.yml reads %v from the environment", read)
	}
	return p
}

func TestComposeServicesAndImages(t *testing.T) {
	p := load(t)
	for name := range core {
		svc, ok := p.Services[name]
		if !ok {
			t.Errorf("service %s is missing", name)
			continue
		}
		if onDemand := slices.Contains(svc.Profiles, "tools"); onDemand != slices.Contains(tools, name) {
			t.Errorf("service %s: profiles %v; only %v run on demand (profile tools)", name, svc.Profiles, tools)
		}
	}
	for name, svc := range p.Services {
		// An untagged or :latest image changes under the stack; a built
		// service without image gets a generated name.
		ref := svc.Image
		if i := strings.LastIndex(ref, "/"); i >= 0 {
			ref = ref[i+1:]
		}
		if _, tag, ok := strings.Cut(ref, ":"); !ok || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q needs an explicit tag", name, svc.Image)
		}
	}
}

func TestComposePorts(t *testing.T) {
	p := load(t)
	published := map[string]string{}
	for name, svc := range p.Services {
		for _, port := range svc.Ports {
			if other, ok := published[port.Published]; ok && port.Published != "" {
				t.Errorf("host port %s is published by both %s and %s", port.Published, other, name)
			}
			published[port.Published] = name
		}
	}
	for name, target := range core {
		if target == 0 {
			continue
		}
		if !slices.ContainsFunc(p.Services[name].Ports, func(pc types.ServicePortConfig) bool { return pc.Target == target }) {
			t.Errorf("service %s does not publish port %d", name, target)
		}
	}
}

// TestComposeEnvironment holds the worker's and the starter's environment to
// what internal/config reads (a misspelt variable is silently ignored), loads
// it with the real configuration code, and checks that each address names a
// service of the stack.
func TestComposeEnvironment(t *testing.T) {
	p := load(t)
	for _, name := range []string{"worker", "starter"} {
		svc := p.Services[name]
		env := map[string]string{}
		for k, v := range svc.Environment {
			if !config.Known(k) {
				t.Errorf("service %s sets %s, which the %s does not read (docs/configuration.md lists what it reads)", name, k, name)
			}
			if v != nil {
				env[k] = *v
			}
		}
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err == nil && name == "worker" {
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("service %s: its environment is refused: %v", name, err)
			continue
		}
		for k, addr := range map[string]string{
			"TEMPORAL_ADDRESS": "//" + cfg.Temporal.Options.HostPort, "DATABASE_URL": cfg.DatabaseURL,
			"STRIPE_BASE_URL": cfg.Stripe.BaseURL, "SENDGRID_BASE_URL": cfg.Email.BaseURL, "NATS_URL": cfg.NATS.URL,
		} {
			u, err := url.Parse(addr)
			if err != nil || u.Hostname() == "" {
				t.Errorf("service %s: %s=%q does not name a host", name, k, addr)
				continue
			}
			if _, ok := p.Services[u.Hostname()]; !ok {
				t.Errorf("service %s: %s points at %s, which is not a service of the stack", name, k, u.Hostname())
			}
		}
	}
}

// TestComposeHealthAndDependencies: the long-running core services report
// health, the worker's health check probes the address the worker serves
// it on, and every depends_on condition can be met.
func TestComposeHealthAndDependencies(t *testing.T) {
	p := load(t)
	healthy := func(s types.ServiceConfig) bool {
		return s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 1
	}
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "nats", "simulators", "worker"} {
		if !healthy(p.Services[name]) {
			t.Errorf("service %s has no health check", name)
		}
	}

	w := p.Services["worker"]
	addr := w.Environment["EFFECTIVELY_HEALTH_ADDR"]
	if addr == nil {
		t.Fatal("the worker's EFFECTIVELY_HEALTH_ADDR is not set: its default, 127.0.0.1:8081, is unreachable from outside the container")
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil || (host != "" && host != "0.0.0.0") {
		t.Errorf("EFFECTIVELY_HEALTH_ADDR=%q: want :PORT, reachable from the other containers", *addr)
	}
	if w.HealthCheck != nil && !strings.Contains(strings.Join(w.HealthCheck.Test, " "), "127.0.0.1:"+port+"/") {
		t.Errorf("the worker's health check %q does not probe port %s of EFFECTIVELY_HEALTH_ADDR", w.HealthCheck.Test, port)
	}

	for name, svc := range p.Services {
		for dep, d := range svc.DependsOn {
			target, ok := p.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			case d.Condition == types.ServiceConditionHealthy && !healthy(target):
				t.Errorf("service %s waits for %s to be healthy, which has no health check", name, dep)
			case d.Condition == types.ServiceConditionCompletedSuccessfully && (target.Restart == "always" || target.Restart == "unless-stopped"):
				t.Errorf("service %s waits for %s to complete, which restarts %s", name, dep, target.Restart)
			}
		}
	}
	for _, dep := range []string{"postgres", "temporal", "temporal-setup", "nats", "simulators"} {
		if _, ok := w.DependsOn[dep]; !ok {
			t.Errorf("the worker does not wait for %s", dep)
		}
	}
}
