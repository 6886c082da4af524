package deploy

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/tools/cluster"
)

// core are the services the stack needs, with the container port each
// must publish (0: none). Other services (monitoring, …) may be added.
var core = map[string]uint32{
	"postgres": 5432, "temporal": 7233, "setup": 0, "temporal-ui": 8080,
	"nats": 4222, "rabbitmq": 5672, "simulators": 0, "worker": 8081, "starter": 0,
	"kafka": 9092, "kafka-setup": 0,
}

// published is every port the stack publishes on the host, as
// "service:container port": what a developer uses from the host, nothing
// more. The simulators (whose /_sim/ control API lists customer emails) and
// NATS monitoring stay on the compose network.
var published = []string{
	"postgres:5432", "temporal:7233", "temporal-ui:8080", "nats:4222", "kafka:9092",
	"rabbitmq:5672", "rabbitmq:15672", // AMQP; the management UI
	"worker:8081", "worker:8234", // health and metrics; the codec server
	"prometheus:9090", "grafana:3000", "jaeger:16686",
}

// tools are services that run only on demand (docker compose run).
var tools = []string{"starter"}

// envScript writes the .env docker-compose.yml reads (make compose-env).
const envScript = "deploy/compose-env.sh"

// composeEnv runs envScript into a temporary directory and returns the file
// it wrote, parsed as `docker compose` parses .env.
func composeEnv(t *testing.T) (map[string]string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), ".env")
	runEnvScript(t, file)
	env, err := dotenv.GetEnvFromFile(map[string]string{}, []string{file})
	if err != nil {
		t.Fatalf("%s wrote a file docker compose cannot read: %v", envScript, err)
	}
	return env, file
}

// runEnvScript runs envScript to write file.
func runEnvScript(t *testing.T, file string) {
	t.Helper()
	//nolint:gosec // the repository's script, on a file in the test's temporary directory
	cmd := exec.CommandContext(t.Context(), "/bin/sh", filepath.Join(repoRoot(t), envScript), file)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", envScript, err, out)
	}
}

// load loads docker-compose.yml as `docker compose` would from the
// repository root, with every profile and, as the only environment, a .env
// written by envScript: the stack must not depend on the caller's shell.
func load(t *testing.T) *types.Project {
	t.Helper()
	env, _ := composeEnv(t)
	p, err := loadWith(t, env)
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

// loadWith loads docker-compose.yml with env as the only environment; a
// variable the file reads that env does not set is an error.
func loadWith(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	var missing []string
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping(env),
	}, func(o *loader.Options) {
		o.SetProjectName("effectively", true)
		o.Profiles = []string{"*"}
		o.Interpolate.LookupValue = func(k string) (string, bool) {
			v, ok := env[k]
			if !ok {
				missing = append(missing, k)
			}
			return v, ok
		}
	})
	if err == nil && len(missing) > 0 {
		slices.Sort(missing)
		missing = slices.Compact(missing)
		err = fmt.Errorf("docker-compose.yml reads %v, which %s does not write", missing, envScript)
	}
	return p, err
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

// TestComposePorts: every published port is bound to 127.0.0.1, no two
// services take the same host port, the core services publish what a
// developer needs, and nothing else is published (the simulators' control
// API, NATS monitoring).
func TestComposePorts(t *testing.T) {
	p := load(t)
	hostPorts := map[string]string{}
	var got []string
	for name, svc := range p.Services {
		for _, port := range svc.Ports {
			if other, ok := hostPorts[port.Published]; ok && port.Published != "" {
				t.Errorf("host port %s is published by both %s and %s", port.Published, other, name)
			}
			hostPorts[port.Published] = name
			if port.HostIP != "127.0.0.1" {
				t.Errorf("service %s publishes port %d on %s; bind it to 127.0.0.1 (\"127.0.0.1:%s:%d\")",
					name, port.Target, cmp.Or(port.HostIP, "every interface"), port.Published, port.Target)
			}
			got = append(got, fmt.Sprintf("%s:%d", name, port.Target))
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
	for _, pt := range got {
		if !slices.Contains(published, pt) {
			t.Errorf("%s is published; publish only %v", pt, published)
		}
	}
	if ports := p.Services["simulators"].Ports; len(ports) > 0 {
		t.Errorf("the simulators publish %v: their /_sim/ control API lists customer emails; the worker reaches them on the compose network", ports)
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
			"RABBITMQ_URL": cfg.RabbitMQ.Source.URL,
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
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "nats", "rabbitmq", "kafka", "simulators", "worker"} {
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
	for _, dep := range []string{"postgres", "temporal", "setup", "nats", "rabbitmq", "kafka-setup", "simulators"} {
		if _, ok := w.DependsOn[dep]; !ok {
			t.Errorf("the worker does not wait for %s", dep)
		}
	}
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestComposeEnvFile: the generator writes a 0600 file with fresh random
// secrets (each run new ones, none shared), a codec key the codec accepts,
// and never overwrites an existing file; git and docker builds ignore .env;
// `make compose-env` runs it; a stack without .env refuses to load, naming
// the target.
func TestComposeEnvFile(t *testing.T) {
	env, file := composeEnv(t)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s writes .env with mode %o, want 600", envScript, perm)
	}
	other, _ := composeEnv(t)
	seen := map[string]string{}
	for k, v := range env {
		if !secretName.MatchString(k) || k == "LOCAL_STRIPE_API_KEY" || k == "LOCAL_SENDGRID_API_KEY" {
			continue
		}
		if len(v) < 32 {
			t.Errorf("%s=%d characters, want at least 32 random ones", k, len(v))
		}
		if other[k] == v {
			t.Errorf("%s is the same in two runs of %s", k, envScript)
		}
		if prev, ok := seen[v]; ok {
			t.Errorf("%s and %s have the same value", prev, k)
		}
		seen[v] = k
	}
	for _, k := range []string{"LOCAL_POSTGRES_PASSWORD", "LOCAL_NATS_WORKER_PASSWORD", "LOCAL_NATS_PUBLISHER_PASSWORD", "LOCAL_CODEC_KEYS", "LOCAL_CODEC_TOKEN"} {
		if _, ok := seen[env[k]]; !ok {
			t.Errorf("%s does not write %s as a secret", envScript, k)
		}
	}
	if _, on, err := codec.LoadKeyring(func(k string) (string, bool) {
		if k != codec.EnvKeys {
			return "", false
		}
		return env["LOCAL_CODEC_KEYS"], true
	}); err != nil || !on {
		t.Errorf("LOCAL_CODEC_KEYS is not a key the codec accepts: %v", err)
	}
	for k, prefix := range map[string]string{"LOCAL_STRIPE_API_KEY": "sk_test_", "LOCAL_SENDGRID_API_KEY": "SG."} {
		if !strings.HasPrefix(env[k], prefix) {
			t.Errorf("%s=%q: want the simulators' fake %s… key", k, env[k], prefix)
		}
	}

	// Run again: the file (Postgres keeps its first password) is kept.
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	runEnvScript(t, file)
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Errorf("%s overwrote an existing .env", envScript)
	}

	for _, f := range []string{".gitignore", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), f))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(string(b), "\n"); !slices.Contains(lines, ".env") && !slices.Contains(lines, "/.env") {
			t.Errorf("%s does not list .env", f)
		}
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^compose-env:.*\n\t.*` + regexp.QuoteMeta(envScript)).Match(mk) {
		t.Errorf("the Makefile has no compose-env target running %s", envScript)
	}

	if _, err := loadWith(t, map[string]string{}); err == nil || !strings.Contains(err.Error(), "run make compose-env first") {
		t.Errorf("docker-compose.yml without .env: %v, want an error saying to run make compose-env first", err)
	}
}

// secretName matches the names of settings that hold a secret.
var secretName = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|PWD|SECRETS?|TOKEN|_KEYS?|_AUTH|CREDENTIALS?|_SEED)$`)

// fromEnvFile is a value docker compose takes from .env, failing when it is
// not set.
var fromEnvFile = regexp.MustCompile(`^\$\{LOCAL_[A-Z0-9_]+:\?[^}]+\}$`)

// TestComposeNoLiteralSecrets reads docker-compose.yml as written, before
// interpolation: every setting whose name says it holds a secret, and every
// password in a URL, is a ${LOCAL_…:?…} reference to .env, and no provider
// key is written in it.
func TestComposeNoLiteralSecrets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	providerKey := regexp.MustCompile(`\b(sk|rk|pk)_(test|live)_|\bSG\.|\bwhsec_`)
	checked := 0
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				at := path + "." + k.Value
				if secretName.MatchString(k.Value) && v.Kind == yaml.ScalarNode {
					checked++
					if !fromEnvFile.MatchString(v.Value) {
						t.Errorf("%s (line %d) is written in docker-compose.yml; take it from .env: ${LOCAL_…:?run make compose-env first}", at, v.Line)
					}
				}
				walk(v, at)
			}
		case yaml.AliasNode:
			// Checked where the anchor is defined.
		case yaml.ScalarNode:
			if providerKey.MatchString(n.Value) {
				t.Errorf("%s (line %d) holds a provider key; take it from .env", path, n.Line)
			}
			// scheme://user:password@host: the password comes from .env.
			if _, rest, ok := strings.Cut(n.Value, "://"); ok {
				if userinfo, _, ok := strings.Cut(rest, "@"); ok {
					if _, password, ok := strings.Cut(userinfo, ":"); ok && !fromEnvFile.MatchString(password) {
						t.Errorf("%s (line %d) has a password in its URL; take it from .env", path, n.Line)
					}
				}
			}
		}
	}
	walk(&doc, "")
	if checked == 0 {
		t.Error("no secret setting found: the check reads nothing")
	}
}

// envOf returns a service's environment after interpolation.
func envOf(p *types.Project, name string) map[string]string {
	env := map[string]string{}
	for k, v := range p.Services[name].Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// hostPort returns the 127.0.0.1 host port a service publishes target on.
func hostPort(p *types.Project, name string, target uint32) (string, bool) {
	for _, pc := range p.Services[name].Ports {
		if pc.Target == target && pc.HostIP == "127.0.0.1" {
			return pc.Published, true
		}
	}
	return "", false
}

// TestComposeEncryption: the worker and the starter encrypt every payload
// with the same key and refuse plaintext ones; the worker's codec server
// runs with a token, is published on loopback, allows the Temporal UI's
// origin, and the UI points at it as the browser reaches it.
func TestComposeEncryption(t *testing.T) {
	p := load(t)
	keys := map[string]string{}
	for _, name := range []string{"worker", "starter"} {
		env := envOf(p, name)
		keys[name] = env[codec.EnvKeys]
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		if cfg.Temporal.Keys == nil {
			t.Errorf("service %s does not encrypt payloads: set %s", name, codec.EnvKeys)
		}
		if !cfg.Temporal.RequireEncryption {
			t.Errorf("service %s reads plaintext payloads: set %s=true", name, codec.EnvRequire)
		}
	}
	if keys["worker"] != keys["starter"] {
		t.Error("the worker and the starter have different codec keys")
	}

	env := envOf(p, "worker")
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.CodecServer.Enabled() {
		t.Fatalf("the worker runs no codec server: set %s", codec.EnvServerAddr)
	}
	_, port, _ := net.SplitHostPort(cfg.CodecServer.Addr)
	target, _ := strconv.ParseUint(port, 10, 32)
	codecPort, ok := hostPort(p, "worker", uint32(target))
	if !ok {
		t.Fatalf("the worker's codec server (%s) is not published on 127.0.0.1", cfg.CodecServer.Addr)
	}
	uiPort, ok := hostPort(p, "temporal-ui", 8080)
	if !ok {
		t.Fatal("the Temporal UI is not published on 127.0.0.1")
	}
	if want := "http://127.0.0.1:" + uiPort; !slices.Contains(cfg.CodecServer.Origins, want) {
		t.Errorf("%s=%v does not allow the Temporal UI at %s", codec.EnvCORSOrigins, cfg.CodecServer.Origins, want)
	}
	if got, want := envOf(p, "temporal-ui")["TEMPORAL_CODEC_ENDPOINT"], "http://127.0.0.1:"+codecPort; got != want {
		t.Errorf("temporal-ui: TEMPORAL_CODEC_ENDPOINT=%q, want %q (the worker's codec server as the browser reaches it)", got, want)
	}
	if _, ok := envOf(p, "starter")[codec.EnvServerAddr]; ok {
		t.Errorf("the starter sets %s: only the worker serves the codec", codec.EnvServerAddr)
	}
}

// TestComposeNATS: the nats service runs deploy/nats/nats.conf, mounted
// read-only where its command reads it, with every password the file refers
// to in its environment; the worker connects as user worker and the starter
// as user publisher, each with that user's password (TestNATSConfPermissions
// checks what each may do).
func TestComposeNATS(t *testing.T) {
	p := load(t)
	root := repoRoot(t)
	nats := p.Services["nats"]
	cmd := []string(nats.Command)
	confAt := ""
	for i, a := range cmd {
		if (a == "-c" || a == "--config") && i+1 < len(cmd) {
			confAt = cmd[i+1]
		}
	}
	if confAt == "" {
		t.Fatalf("the nats service's command %q does not name a configuration file (-c)", cmd)
	}
	mounted := false
	for _, v := range nats.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == confAt {
			mounted = true
			if v.Source != filepath.Join(root, natsConf) {
				t.Errorf("nats mounts %s at %s, want %s", v.Source, confAt, natsConf)
			}
			if !v.ReadOnly {
				t.Errorf("nats mounts %s writable; mount it :ro", natsConf)
			}
		}
	}
	if !mounted {
		t.Errorf("nats reads %s, which is not mounted from %s", confAt, natsConf)
	}

	conf, err := os.ReadFile(filepath.Join(root, natsConf))
	if err != nil {
		t.Fatal(err)
	}
	env := envOf(p, "nats")
	refs := 0
	for _, line := range strings.Split(string(conf), "\n") {
		line, _, _ = strings.Cut(line, "#")
		// A variable reference is an unquoted value: key: $NAME.
		for _, m := range regexp.MustCompile(`:\s*\$([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(line, -1) {
			refs++
			if env[m[1]] == "" {
				t.Errorf("%s refers to $%s, which the nats service's environment does not set", natsConf, m[1])
			}
		}
	}
	for user, v := range natsUsers {
		if !regexp.MustCompile(`user:\s*` + user + `\s+password:\s*\$` + v + `\b`).Match(conf) {
			t.Errorf("%s has no user %s with password $%s", natsConf, user, v)
		}
	}
	if refs == 0 {
		t.Errorf("%s refers to no password variable", natsConf)
	}

	for svc, user := range map[string]string{"worker": "worker", "starter": "publisher"} {
		e := envOf(p, svc)
		if e["NATS_USER"] != user {
			t.Errorf("service %s: NATS_USER=%q, want %s", svc, e["NATS_USER"], user)
		}
		if e["NATS_PASSWORD"] == "" || e["NATS_PASSWORD"] != env[natsUsers[user]] {
			t.Errorf("service %s: NATS_PASSWORD is not user %s's password (the nats service's %s)", svc, user, natsUsers[user])
		}
	}
	if hc := nats.HealthCheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "127.0.0.1:8222/healthz") ||
		!strings.Contains(string(conf), `http: "127.0.0.1:8222"`) {
		t.Errorf("nats' health check does not probe the monitoring address of %s", natsConf)
	}
}

// TestComposePostgresPassword: Postgres, Temporal's auto-setup and the
// worker and starter's DATABASE_URL use the one generated password.
func TestComposePostgresPassword(t *testing.T) {
	p := load(t)
	want := envOf(p, "postgres")["POSTGRES_PASSWORD"]
	if want == "" {
		t.Fatal("postgres: POSTGRES_PASSWORD is not set")
	}
	if got := envOf(p, "temporal")["POSTGRES_PWD"]; got != want {
		t.Error("temporal: POSTGRES_PWD is not postgres' POSTGRES_PASSWORD")
	}
	for _, name := range []string{"worker", "starter"} {
		u, err := url.Parse(envOf(p, name)["DATABASE_URL"])
		if err != nil {
			t.Errorf("service %s: DATABASE_URL: %v", name, err)
			continue
		}
		if got, _ := u.User.Password(); got != want {
			t.Errorf("service %s: DATABASE_URL's password is not postgres' POSTGRES_PASSWORD", name)
		}
	}
}

// TestComposeTemporalAgreesWithTheCluster: docker-compose's Temporal runs
// the server version, persistence plugin, history shards and namespace
// retention that tools/cluster runs (the production path the soak and the
// bench measure), and its namespace is prepared by `worker setup` from the
// worker's own image, as tested there, before the worker and the starter
// start.
func TestComposeTemporalAgreesWithTheCluster(t *testing.T) {
	p := load(t)
	tmp := p.Services["temporal"]
	if want := "temporalio/auto-setup:" + strings.TrimPrefix(cluster.ServerVersion, "v"); tmp.Image != want {
		t.Errorf("temporal image %q, want %q (tools/cluster.ServerVersion)", tmp.Image, want)
	}
	env := func(k string) string {
		if v := tmp.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	if env("DB") != cluster.SQLPlugin {
		t.Errorf("temporal DB=%q, want %q", env("DB"), cluster.SQLPlugin)
	}
	if env("NUM_HISTORY_SHARDS") != strconv.Itoa(cluster.DefaultShards) {
		t.Errorf("NUM_HISTORY_SHARDS=%q, want %d (shards are fixed for a cluster's life)", env("NUM_HISTORY_SHARDS"), cluster.DefaultShards)
	}
	if d, err := time.ParseDuration(env("DEFAULT_NAMESPACE_RETENTION")); err != nil || d != cluster.DefaultRetention {
		t.Errorf("DEFAULT_NAMESPACE_RETENTION=%q, want %s", env("DEFAULT_NAMESPACE_RETENTION"), cluster.DefaultRetention)
	}
	setup, w := p.Services["setup"], p.Services["worker"]
	if setup.Image != w.Image || setup.Build == nil || w.Build == nil || setup.Build.Target != w.Build.Target {
		t.Errorf("the setup service runs %q (target %v), not the worker's image %q", setup.Image, setup.Build, w.Image)
	}
	if strings.Join(setup.Command, " ") != "setup" {
		t.Errorf("the setup service runs %q, want `worker setup`", setup.Command)
	}
	for _, name := range []string{"worker", "starter"} {
		if d, ok := p.Services[name].DependsOn["setup"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s does not wait for the setup service to complete", name)
		}
	}
}

// TestComposeRabbitMQ: the RabbitMQ service runs the management plugin's
// image, has a user whose password comes from .env (no literal, no guest,
// which RabbitMQ refuses from outside the container's loopback anyway), and
// keeps its queues in a volume.
func TestComposeRabbitMQ(t *testing.T) {
	p := load(t)
	svc, ok := p.Services["rabbitmq"]
	if !ok {
		t.Fatal("no rabbitmq service")
	}
	if !strings.Contains(svc.Image, "-management") {
		t.Errorf("rabbitmq image %q: want the management plugin's image (…-management…)", svc.Image)
	}
	user, pass := svc.Environment["RABBITMQ_DEFAULT_USER"], svc.Environment["RABBITMQ_DEFAULT_PASS"]
	if user == nil || *user == "guest" || pass == nil || *pass == "" {
		t.Errorf("rabbitmq user %v / password %v: want a user of its own with the password from .env", user, pass)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "RABBITMQ_DEFAULT_PASS: ${LOCAL_RABBITMQ_PASSWORD:?") {
		t.Error("RABBITMQ_DEFAULT_PASS must come from .env (LOCAL_RABBITMQ_PASSWORD) and stop compose when missing")
	}
	hasData := false
	for _, v := range svc.Volumes {
		hasData = hasData || v.Target == "/var/lib/rabbitmq"
	}
	if !hasData {
		t.Error("rabbitmq keeps no volume at /var/lib/rabbitmq: a restart would lose the queues")
	}
}
