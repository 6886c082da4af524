package deploy

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/mail"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

const (
	projectName  = "effectively"
	composeFile  = "docker-compose.yml"
	dockerfile   = "Dockerfile"
	dockerignore = ".dockerignore"
	initSQL      = "deploy/postgres/init.sql"
	toolsProfile = "tools"
	binDir       = "/usr/local/bin"
)

// binaries are the programs the image ships, with the package each is built
// from; each also names the Dockerfile target whose entrypoint it is.
var binaries = []struct{ name, pkg string }{
	{"worker", "./worker"},
	{"starter", "./starter"},
	{"providersim", "./internal/sim/providersim"},
}

var expectedServices = []string{
	"postgres", "temporal", "temporal-setup", "temporal-ui",
	"nats", "simulators", "worker", "starter",
}

// longRunning services must report health: others wait on them.
var longRunning = []string{"postgres", "temporal", "temporal-ui", "nats", "simulators", "worker"}

// builtServices maps each service built from the Dockerfile to the binary it runs.
var builtServices = map[string]string{
	"simulators": "providersim",
	"worker":     "worker",
	"starter":    "starter",
}

// workerEnv is what the worker and the starter read.
var workerEnv = []string{
	"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "EFFECTIVELY_TASK_QUEUE",
	"DATABASE_URL", "STRIPE_API_KEY", "STRIPE_BASE_URL",
	"SENDGRID_API_KEY", "SENDGRID_BASE_URL", "EMAIL_FROM",
	"NATS_URL", "LOG_LEVEL",
}

// endpointVars are the variables that name another service of the stack.
var endpointVars = []string{"TEMPORAL_ADDRESS", "DATABASE_URL", "STRIPE_BASE_URL", "SENDGRID_BASE_URL", "NATS_URL"}

// ---------------------------------------------------------------------------
// Compose file

func TestComposeLoadsWithoutHostEnvironment(t *testing.T) {
	// loadProject fails the test if the file reads any variable from the
	// environment: the stack must come up the same on every machine.
	p := loadProject(t)
	if p.Name != projectName {
		t.Errorf("project name = %q, want %q", p.Name, projectName)
	}
}

func TestComposeServices(t *testing.T) {
	p := loadProject(t)
	all := p.AllServices()
	for _, name := range expectedServices {
		if _, ok := all[name]; !ok {
			t.Errorf("service %q is missing from %s", name, composeFile)
			continue
		}
		_, enabled := p.Services[name]
		switch {
		case name == "starter" && enabled:
			t.Errorf("service starter runs on a plain `docker compose up`; put it under profiles: [%s]", toolsProfile)
		case name != "starter" && !enabled:
			t.Errorf("service %q does not run on a plain `docker compose up` (profiles %v)", name, all[name].Profiles)
		}
	}

	withTools := loadProject(t, toolsProfile)
	if _, ok := withTools.Services["starter"]; !ok {
		t.Errorf("service starter is not enabled by --profile %s", toolsProfile)
	}
}

func TestComposeImagesArePinned(t *testing.T) {
	p := loadProject(t)
	for name, svc := range p.AllServices() {
		if svc.Image == "" {
			// A built service without image: gets <project>-<service>:latest.
			t.Errorf("service %q has no image: name it with an explicit tag", name)
			continue
		}
		if !pinned(svc.Image) {
			t.Errorf("service %q: image %q is not pinned to an explicit tag other than latest", name, svc.Image)
		}
	}

	repos := map[string]string{
		"postgres":       "postgres",
		"temporal":       "temporalio/auto-setup",
		"temporal-setup": "temporalio/admin-tools",
		"temporal-ui":    "temporalio/ui",
		"nats":           "nats",
	}
	for name, want := range repos {
		svc, ok := service(t, p, name)
		if !ok {
			continue
		}
		if repo, _, _ := splitImage(svc.Image); repo != want {
			t.Errorf("service %q: image %q, want repository %s", name, svc.Image, want)
		}
	}

	// admin-tools tags are "<server version>-tctl-...-cli-...": the CLI that
	// registers search attributes must come from the same server release.
	server, okServer := service(t, p, "temporal")
	tools, okTools := service(t, p, "temporal-setup")
	if okServer && okTools {
		_, serverTag, _ := splitImage(server.Image)
		_, toolsTag, _ := splitImage(tools.Image)
		if serverTag == "" || !releaseTag(toolsTag, serverTag) {
			t.Errorf("temporal-setup image %q is not from the same release as temporal image %q", tools.Image, server.Image)
		}
	}
}

func TestComposeHealthchecks(t *testing.T) {
	p := loadProject(t)
	for _, name := range longRunning {
		svc, ok := service(t, p, name)
		if !ok {
			continue
		}
		if !hasHealthcheck(svc) {
			t.Errorf("service %q has no usable healthcheck", name)
			continue
		}
		// Every local HTTP probe must hit a port the container listens on.
		ports := listenPorts(svc)
		for _, port := range localHTTPPorts(healthText(svc)) {
			if !ports[port] {
				t.Errorf("service %q: healthcheck probes port %d, which it does not expose (ports %v)", name, port, slices.Sorted(maps.Keys(ports)))
			}
		}
	}

	contains := map[string][]string{
		"postgres": {"pg_isready", "-U postgres"},
		"temporal": {"temporal operator cluster health", "--address temporal:7233"},
	}
	for name, subs := range contains {
		svc, ok := service(t, p, name)
		if !ok || !hasHealthcheck(svc) {
			continue
		}
		text := healthText(svc)
		for _, sub := range subs {
			if !strings.Contains(text, sub) {
				t.Errorf("service %q: healthcheck %q does not contain %q", name, text, sub)
			}
		}
	}

	// HTTP probes: every URL must be the endpoint that reports health.
	paths := map[string]string{
		"temporal-ui": "/",
		"nats":        "/healthz",
		"simulators":  "/_sim/stats",
		"worker":      "/readyz",
	}
	for name, want := range paths {
		svc, ok := service(t, p, name)
		if !ok || !hasHealthcheck(svc) {
			continue
		}
		urls := localHTTP.FindAllStringSubmatch(healthText(svc), -1)
		if len(urls) == 0 {
			t.Errorf("service %q: healthcheck %q probes no local HTTP endpoint", name, healthText(svc))
		}
		for _, u := range urls {
			if got := cmp.Or(u[2], "/"); got != want {
				t.Errorf("service %q: healthcheck probes %s, want path %s", name, u[0], want)
			}
		}
	}

	// The worker's probe must hit the address the worker serves health on.
	if w, ok := service(t, p, "worker"); ok && hasHealthcheck(w) {
		// internal/config's default binds loopback only.
		addr := cmp.Or(envValue(w, "EFFECTIVELY_HEALTH_ADDR"), "127.0.0.1:8081")
		host, portText, err := net.SplitHostPort(addr)
		port, convErr := strconv.Atoi(portText)
		switch {
		case err != nil || convErr != nil:
			t.Errorf("worker: EFFECTIVELY_HEALTH_ADDR %q is not host:port", addr)
		case !slices.Contains(localHTTPPorts(healthText(w)), port):
			t.Errorf("worker: healthcheck %q does not probe the health port %d", healthText(w), port)
		case publishedFor(w, port) != "" && isLoopback(host):
			t.Errorf("worker: health port %d is published, but EFFECTIVELY_HEALTH_ADDR %q only listens inside the container", port, addr)
		}
	}

	// NATS monitoring (where /healthz lives) is off unless -m is given.
	if n, ok := service(t, p, "nats"); ok {
		if mon, found := flagValue(n.Command, "m", "http_port"); !found || mon != "8222" {
			t.Errorf("nats: command %q does not enable monitoring on 8222 (-m 8222)", n.Command)
		}
	}
}

func TestComposeDependsOn(t *testing.T) {
	p := loadProject(t, toolsProfile)
	want := []struct{ svc, dep, condition string }{
		{"temporal", "postgres", types.ServiceConditionHealthy},
		{"temporal-setup", "temporal", types.ServiceConditionHealthy},
		{"temporal-ui", "temporal", ""},
		{"worker", "postgres", types.ServiceConditionHealthy},
		{"worker", "temporal-setup", types.ServiceConditionCompletedSuccessfully},
		{"worker", "simulators", types.ServiceConditionHealthy},
		{"worker", "nats", types.ServiceConditionHealthy},
	}
	for _, w := range want {
		svc, ok := service(t, p, w.svc)
		if !ok {
			continue
		}
		dep, ok := svc.DependsOn[w.dep]
		switch {
		case !ok:
			t.Errorf("service %q does not depend on %q", w.svc, w.dep)
		case w.condition != "" && dep.Condition != w.condition:
			t.Errorf("service %q depends on %q with condition %q, want %q", w.svc, w.dep, dep.Condition, w.condition)
		}
	}

	// Conditions compose can actually satisfy.
	all := p.AllServices()
	for name, svc := range all {
		for depName, dep := range svc.DependsOn {
			target, ok := all[depName]
			if !ok {
				t.Errorf("service %q depends on unknown service %q", name, depName)
				continue
			}
			switch dep.Condition {
			case types.ServiceConditionHealthy:
				if !hasHealthcheck(target) {
					t.Errorf("service %q waits for %q to be healthy, but %q has no healthcheck", name, depName, depName)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if target.Restart == types.RestartPolicyAlways || target.Restart == types.RestartPolicyUnlessStopped {
					t.Errorf("service %q waits for %q to complete, but %q restarts %q", name, depName, depName, target.Restart)
				}
			}
		}
	}
}

func TestComposeTemporalSetup(t *testing.T) {
	p := loadProject(t)
	svc, ok := service(t, p, "temporal-setup")
	if !ok {
		return
	}
	if svc.Restart != types.RestartPolicyOnFailure {
		t.Errorf("temporal-setup: restart = %q, want %q", svc.Restart, types.RestartPolicyOnFailure)
	}
	script := strings.Join(append(slices.Clone(svc.Entrypoint), svc.Command...), " ")
	if !regexp.MustCompile(`temporal\s+operator\s+search-attribute\s+create\b`).MatchString(script) {
		t.Fatalf("temporal-setup does not run `temporal operator search-attribute create`: %q", script)
	}
	for _, sub := range []string{"--namespace default", "--address temporal:7233"} {
		if !strings.Contains(normalizeSpace(script), sub) {
			t.Errorf("temporal-setup: command does not contain %q", sub)
		}
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`--name\s+(\w+)\s+--type\s+(\w+)`).FindAllStringSubmatch(script, -1) {
		got[m[1]] = m[2]
	}
	for name, typ := range map[string]string{"MessageId": "Keyword", "Consumer": "Keyword", "OrderId": "Int"} {
		if got[name] != typ {
			t.Errorf("temporal-setup: search attribute %s registered as %q, want %q", name, got[name], typ)
		}
	}
	// Upserting an unregistered attribute fails the workflow task, so every
	// key the code declares must be registered, with its type.
	for name, typ := range searchAttributesInCode(t, repoRoot(t)) {
		if got[name] != typ {
			t.Errorf("temporal-setup: the code declares search attribute %s (%s), registered as %q", name, typ, got[name])
		}
	}
	// Every command must reach the frontend where it listens.
	addresses := regexp.MustCompile(`--address[=\s]+(\S+)`).FindAllStringSubmatch(script, -1)
	if len(addresses) == 0 {
		t.Error("temporal-setup: no --address given; the CLI would dial localhost")
	}
	for _, m := range addresses {
		if err := checkEndpoint(p, "--address", m[1]); err != nil {
			t.Errorf("temporal-setup: %v", err)
		}
	}
}

func TestComposeTemporalServer(t *testing.T) {
	p := loadProject(t)
	tmp, ok1 := service(t, p, "temporal")
	pg, ok2 := service(t, p, "postgres")
	if !ok1 || !ok2 {
		return
	}
	if got := envValue(tmp, "DB"); got != "postgres12" {
		t.Errorf("temporal: DB = %q, want postgres12", got)
	}
	if seeds := envValue(tmp, "POSTGRES_SEEDS"); seeds != "postgres" {
		t.Errorf("temporal: POSTGRES_SEEDS = %q, want the postgres service", seeds)
	}
	if port := envValue(tmp, "DB_PORT"); !listenPorts(pg)[atoi(port)] {
		t.Errorf("temporal: DB_PORT = %q is not a port postgres listens on", port)
	}
	if envValue(tmp, "POSTGRES_USER") != envValue(pg, "POSTGRES_USER") ||
		envValue(tmp, "POSTGRES_PWD") != envValue(pg, "POSTGRES_PASSWORD") {
		t.Error("temporal: POSTGRES_USER/POSTGRES_PWD do not match the postgres service's POSTGRES_USER/POSTGRES_PASSWORD")
	}

	if ui, ok := service(t, p, "temporal-ui"); ok {
		if err := checkEndpoint(p, "TEMPORAL_ADDRESS", envValue(ui, "TEMPORAL_ADDRESS")); err != nil {
			t.Errorf("temporal-ui: %v", err)
		}
		origins := envValue(ui, "TEMPORAL_CORS_ORIGINS")
		if host := publishedFor(ui, 8080); host == "" || !strings.Contains(origins, "http://localhost:"+host) {
			t.Errorf("temporal-ui: TEMPORAL_CORS_ORIGINS %q does not allow the published UI http://localhost:%s", origins, host)
		}
	}
}

func TestComposeWorkerEnvironment(t *testing.T) {
	p := loadProject(t, toolsProfile)
	worker, ok := service(t, p, "worker")
	if !ok {
		return
	}
	for _, key := range append(slices.Clone(workerEnv), "EFFECTIVELY_HEALTH_ADDR") {
		if envValue(worker, key) == "" {
			t.Errorf("worker: %s is not set", key)
		}
	}
	for _, key := range endpointVars {
		value := envValue(worker, key)
		if value == "" {
			continue
		}
		if err := checkEndpoint(p, key, value); err != nil {
			t.Errorf("worker: %v", err)
			continue
		}
		host, _, _ := splitEndpoint(value)
		if _, ok := worker.DependsOn[host]; !ok {
			t.Errorf("worker: %s points at %q, but the worker does not depend on it", key, host)
		}
	}

	// Each simulator URL must hit the port that simulator listens on.
	if sim, ok := service(t, p, "simulators"); ok {
		for _, s := range []struct {
			key, flag string
			port      int // providersim's default
		}{
			{"STRIPE_BASE_URL", "stripe-addr", 12111},
			{"SENDGRID_BASE_URL", "sendgrid-addr", 12112},
		} {
			want := s.port
			if addr, found := flagValue(sim.Command, s.flag); found {
				_, portText, err := net.SplitHostPort(addr)
				if err != nil {
					t.Errorf("simulators: -%s %q is not host:port", s.flag, addr)
					continue
				}
				want = atoi(portText)
			}
			if _, port, err := splitEndpoint(envValue(worker, s.key)); err == nil && port != want {
				t.Errorf("worker: %s uses port %d, but the simulator behind it listens on %d (-%s)", s.key, port, want, s.flag)
			}
		}
	}

	// Credentials must match the database and be test-only.
	if pg, ok := service(t, p, "postgres"); ok {
		if u, err := url.Parse(envValue(worker, "DATABASE_URL")); err == nil {
			pass, _ := u.User.Password()
			if u.User.Username() != envValue(pg, "POSTGRES_USER") || pass != envValue(pg, "POSTGRES_PASSWORD") {
				t.Error("worker: DATABASE_URL credentials do not match the postgres service's POSTGRES_USER/POSTGRES_PASSWORD")
			}
			if u.Query().Get("sslmode") != "disable" {
				t.Error("worker: DATABASE_URL lacks sslmode=disable; the local postgres has no TLS")
			}
		}
	}
	if key := envValue(worker, "STRIPE_API_KEY"); !strings.HasPrefix(key, "sk_test_") {
		t.Errorf("worker: STRIPE_API_KEY %q is not a test-mode key (sk_test_...)", key)
	}
	if key := envValue(worker, "SENDGRID_API_KEY"); !strings.HasPrefix(key, "SG.") {
		t.Errorf("worker: SENDGRID_API_KEY %q does not look like a SendGrid key (SG.)", key)
	}
	if _, err := mail.ParseAddress(envValue(worker, "EMAIL_FROM")); err != nil {
		t.Errorf("worker: EMAIL_FROM: %v", err)
	}
	if worker.Restart != types.RestartPolicyUnlessStopped {
		t.Errorf("worker: restart = %q, want %q", worker.Restart, types.RestartPolicyUnlessStopped)
	}

	// The starter talks to the same stack as the worker.
	starter, ok := service(t, p, "starter")
	if !ok {
		return
	}
	for _, key := range workerEnv {
		if got, want := envValue(starter, key), envValue(worker, key); got != want {
			t.Errorf("starter: %s = %q, worker has %q", key, got, want)
		}
	}
	mounted := false
	for _, v := range starter.Volumes {
		if v.Target == "/examples" {
			mounted = true
			if !v.ReadOnly {
				t.Error("starter: /examples is not mounted read-only")
			}
			if v.Type != types.VolumeTypeBind || filepath.Clean(v.Source) != filepath.Join(repoRoot(t), "examples") {
				t.Errorf("starter: /examples is mounted from %s %q, want bind ./examples", v.Type, v.Source)
			}
		}
	}
	if !mounted {
		t.Error("starter: ./examples is not mounted at /examples")
	}
}

func TestComposePorts(t *testing.T) {
	p := loadProject(t, toolsProfile)
	want := []struct {
		svc               string
		published, target int
	}{
		{"postgres", 5432, 5432},
		{"temporal", 7233, 7233},
		{"temporal-ui", 8080, 8080},
		{"nats", 4222, 4222},
		{"simulators", 12111, 12111},
		{"simulators", 12112, 12112},
	}
	for _, w := range want {
		svc, ok := service(t, p, w.svc)
		if !ok {
			continue
		}
		if got := publishedFor(svc, w.target); got != strconv.Itoa(w.published) {
			t.Errorf("service %q: container port %d published as %q, want %d", w.svc, w.target, got, w.published)
		}
	}

	owner := map[string]string{}
	for name, svc := range p.Services {
		for _, port := range svc.Ports {
			if port.Published == "" {
				continue
			}
			hostPort := port.HostIP + ":" + port.Published + "/" + port.Protocol
			if other, dup := owner[hostPort]; dup {
				t.Errorf("host port %s is published by both %q and %q", port.Published, other, name)
			}
			owner[hostPort] = name
		}
	}
}

func TestComposeVolumes(t *testing.T) {
	p := loadProject(t)
	for name, target := range map[string]string{"postgres": "/var/lib/postgresql/data", "nats": "/data"} {
		svc, ok := service(t, p, name)
		if !ok {
			continue
		}
		v, found := volumeAt(svc, target)
		if !found || v.Type != types.VolumeTypeVolume || p.Volumes[v.Source].Name == "" {
			t.Errorf("service %q: %s is not on a named volume", name, target)
		}
	}
	// JetStream must store where the volume is.
	if n, ok := service(t, p, "nats"); ok {
		if _, js := flagValue(n.Command, "js", "jetstream"); !js {
			t.Errorf("nats: JetStream is not enabled (-js): %q", n.Command)
		}
		dir, found := flagValue(n.Command, "sd", "store_dir")
		if v, onVolume := volumeAt(n, dir); !found || !onVolume || v.Type != types.VolumeTypeVolume {
			t.Errorf("nats: JetStream store dir %q is not on a named volume", dir)
		}
	}
}

func TestComposeInitSQL(t *testing.T) {
	root := repoRoot(t)
	p := loadProject(t)
	pg, ok := service(t, p, "postgres")
	if !ok {
		return
	}
	initPath := filepath.Join(root, filepath.FromSlash(initSQL))
	mounted := false
	for _, v := range pg.Volumes {
		if v.Type == types.VolumeTypeBind && filepath.Clean(v.Source) == initPath {
			mounted = true
			if !strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") || !strings.HasSuffix(v.Target, ".sql") {
				t.Errorf("postgres: %s is mounted at %s, want /docker-entrypoint-initdb.d/*.sql", initSQL, v.Target)
			}
			if !v.ReadOnly {
				t.Errorf("postgres: %s is not mounted read-only", initSQL)
			}
		}
	}
	if !mounted {
		t.Errorf("postgres: %s is not mounted into the container", initSQL)
	}

	raw, err := os.ReadFile(initPath)
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	re := regexp.MustCompile(`(?i)\bcreate\s+database\s+"?([A-Za-z0-9_]+)"?`)
	for _, m := range re.FindAllStringSubmatch(stripSQLComments(string(raw)), -1) {
		created[strings.ToLower(m[1])] = true
	}
	if !created["effectively"] {
		t.Errorf("%s does not create the database effectively (creates %v)", initSQL, slices.Sorted(maps.Keys(created)))
	}
	if w, ok := service(t, p, "worker"); ok {
		if u, err := url.Parse(envValue(w, "DATABASE_URL")); err == nil {
			db := strings.TrimPrefix(u.Path, "/")
			if db != "postgres" && !created[strings.ToLower(db)] {
				t.Errorf("worker: DATABASE_URL names database %q, which %s does not create", db, initSQL)
			}
		}
	}
}

func TestComposeBuilds(t *testing.T) {
	root := repoRoot(t)
	p := loadProject(t, toolsProfile)
	for name, bin := range builtServices {
		svc, ok := service(t, p, name)
		if !ok {
			continue
		}
		if svc.Build == nil {
			t.Errorf("service %q is not built from the repository", name)
			continue
		}
		if filepath.Clean(svc.Build.Context) != root {
			t.Errorf("service %q: build context %q, want the repository root", name, svc.Build.Context)
		}
		if info, err := os.Stat(svc.Build.Context); err != nil || !info.IsDir() {
			t.Errorf("service %q: build context %q is not a directory", name, svc.Build.Context)
			continue
		}
		file := svc.Build.Dockerfile
		if file == "" {
			file = dockerfile
		}
		if !filepath.IsAbs(file) {
			file = filepath.Join(svc.Build.Context, file)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("service %q: %v", name, err)
			continue
		}
		df := parseDockerfile(string(raw))
		if svc.Build.Target != bin {
			t.Errorf("service %q: build target %q, want %q", name, svc.Build.Target, bin)
		}
		stage, ok := df.target(svc.Build.Target)
		if !ok {
			t.Errorf("service %q: build target %q is not a stage of %s", name, svc.Build.Target, file)
			continue
		}
		entry := []string(svc.Entrypoint)
		if len(entry) == 0 {
			entry = df.entrypoint(stage)
		}
		if want := path.Join(binDir, bin); len(entry) == 0 || entry[0] != want {
			t.Errorf("service %q runs %q, want %s", name, entry, want)
		}
	}
}

// ---------------------------------------------------------------------------
// Dockerfile and .dockerignore

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	df := parseDockerfile(string(raw))
	if len(df.stages) == 0 {
		t.Fatalf("%s has no FROM", dockerfile)
	}

	for _, s := range df.stages {
		if _, isStage := df.byName(s.base); !isStage && !pinned(s.base) {
			t.Errorf("stage %q: base image %q is not pinned to an explicit tag other than latest", s.name, s.base)
		}
	}

	// The builder: Go from go.mod's release, dependencies cached before sources.
	build, ok := df.stageRunning("go build")
	if !ok {
		t.Fatalf("%s: no stage runs `go build`", dockerfile)
	}
	repo, tag, _ := splitImage(df.rootImage(build))
	if goVersion := goModVersion(t, root); repo != "golang" || !releaseTag(tag, goVersion) {
		t.Errorf("builder stage %q is based on %q, want golang:%s (go.mod's go version)", build.name, df.rootImage(build), goVersion)
	}
	copyMod, download, copyAll, compile := -1, -1, -1, -1
	for i, in := range build.instrs {
		switch {
		case in.cmd == "COPY" && strings.Contains(in.args, "go.mod") && strings.Contains(in.args, "go.sum") && copyMod < 0:
			copyMod = i
		case in.cmd == "RUN" && strings.Contains(in.args, "go mod download") && download < 0:
			download = i
		case in.cmd == "COPY" && slices.Equal(copyArgs(in.args), []string{".", "."}) && copyAll < 0:
			copyAll = i
		case in.cmd == "RUN" && strings.Contains(in.args, "go build") && compile < 0:
			compile = i
		}
	}
	if copyMod < 0 || download < copyMod || copyAll < download || compile < copyAll {
		t.Errorf("builder stage %q: want COPY go.mod go.sum, RUN go mod download, COPY . ., RUN go build in that order", build.name)
	}

	run := build.instrs[compile].args
	if !strings.Contains(run, "CGO_ENABLED=0") && !df.hasEnv(build, "CGO_ENABLED", "0") {
		t.Error("go build does not run with CGO_ENABLED=0")
	}
	outputs := map[string]string{} // binary name -> path in the builder
	built := map[string]bool{}     // packages go build is given
	for _, cmd := range goBuildCommands(run) {
		if !slices.Contains(cmd, "-trimpath") {
			t.Errorf("go build without -trimpath: %q", strings.Join(cmd, " "))
		}
		if ld := optionValue(cmd, "-ldflags"); !slices.Contains(strings.Fields(ld), "-s") || !slices.Contains(strings.Fields(ld), "-w") {
			t.Errorf("go build without -ldflags \"-s -w\": %q", strings.Join(cmd, " "))
		}
		out := optionValue(cmd, "-o")
		for _, pkg := range buildPackages(cmd) {
			name := path.Base(pkg)
			switch {
			case strings.HasSuffix(out, "/"):
				outputs[name] = path.Join(out, name)
			case out != "":
				outputs[name] = out
			}
			built[pkg] = true
		}
	}

	// The three binaries: built from packages that exist, shipped in the image,
	// each the entrypoint of the target named after it.
	final := df.stages[len(df.stages)-1]
	for _, b := range binaries {
		if !built[b.pkg] {
			t.Errorf("go build does not build %s", b.pkg)
		}
		checkMainPackage(t, root, b.pkg)

		stage, ok := df.byName(b.name)
		if !ok {
			t.Errorf("%s has no %q target", dockerfile, b.name)
			continue
		}
		want := path.Join(binDir, b.name)
		if entry := df.entrypoint(stage); len(entry) == 0 || entry[0] != want {
			t.Errorf("target %q: ENTRYPOINT %q, want [%q]", b.name, entry, want)
		}
		if user := df.user(stage); !nonRoot(user) {
			t.Errorf("target %q runs as %q, want a non-root USER", b.name, user)
		}
		if out, ok := outputs[b.name]; !ok || !df.copiesFrom(stage, build.name, out, want) {
			t.Errorf("target %q does not COPY --from=%s the %s binary (%q) to %s", b.name, build.name, b.name, out, want)
		}
	}
	if final.name != "worker" {
		t.Errorf("the last stage (what a plain `docker build` produces) is %q, want worker", final.name)
	}
}

func TestDockerignore(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, dockerignore))
	if err != nil {
		t.Fatal(err)
	}
	ignore := parseDockerignore(string(raw))
	keep := []string{"go.mod", "go.sum"}
	for _, b := range binaries {
		keep = append(keep, path.Join(strings.TrimPrefix(b.pkg, "./"), "main.go"))
	}
	for _, p := range keep {
		if ignore.excludes(p) {
			t.Errorf("%s excludes %s, which the image build needs", dockerignore, p)
		}
	}
	for _, p := range []string{".git/HEAD", "bin/worker", "results/run.json"} {
		if !ignore.excludes(p) {
			t.Errorf("%s does not exclude %s", dockerignore, p)
		}
	}
}

// ---------------------------------------------------------------------------
// Loading helpers

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// loadProject loads the compose file the way `docker compose` would from the
// repository root, with the given profiles enabled and no environment.
func loadProject(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	details := types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, composeFile)}},
		Environment: types.Mapping{},
	}
	var lookedUp []string
	project, err := loader.LoadWithContext(t.Context(), details, func(o *loader.Options) {
		o.SetProjectName(projectName, true)
		o.Profiles = profiles
		o.Interpolate.LookupValue = func(key string) (string, bool) {
			lookedUp = append(lookedUp, key)
			return "", false
		}
	})
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}
	if len(lookedUp) > 0 {
		slices.Sort(lookedUp)
		t.Errorf("%s reads %v from the environment; the stack must not depend on the caller's shell", composeFile, slices.Compact(lookedUp))
	}
	return project
}

func service(t *testing.T, p *types.Project, name string) (types.ServiceConfig, bool) {
	t.Helper()
	svc, ok := p.AllServices()[name]
	if !ok {
		t.Errorf("service %q is missing from %s", name, composeFile)
	}
	return svc, ok
}

func hasHealthcheck(svc types.ServiceConfig) bool {
	hc := svc.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 2 {
		return false
	}
	return hc.Test[0] == "CMD" || hc.Test[0] == "CMD-SHELL"
}

func healthText(svc types.ServiceConfig) string {
	if svc.HealthCheck == nil || len(svc.HealthCheck.Test) == 0 {
		return ""
	}
	return normalizeSpace(strings.Join(svc.HealthCheck.Test[1:], " "))
}

// localHTTP matches a URL on the container itself: port, then path.
var localHTTP = regexp.MustCompile(`https?://(?:localhost|127\.0\.0\.1|\[::1\]):(\d+)(/[^\s"'?#]*)?`)

func localHTTPPorts(text string) []int {
	var ports []int
	for _, m := range localHTTP.FindAllStringSubmatch(text, -1) {
		ports = append(ports, atoi(m[1]))
	}
	return ports
}

// listenPorts is the set of container ports a service declares (ports: and expose:).
func listenPorts(svc types.ServiceConfig) map[int]bool {
	ports := map[int]bool{}
	for _, p := range svc.Ports {
		ports[int(p.Target)] = true
	}
	for _, e := range svc.Expose {
		e, _, _ = strings.Cut(e, "/")
		lo, hi, isRange := strings.Cut(e, "-")
		if !isRange {
			hi = lo
		}
		for port := atoi(lo); port > 0 && port <= atoi(hi); port++ {
			ports[port] = true
		}
	}
	return ports
}

// publishedFor returns the host port a container port is published on.
func publishedFor(svc types.ServiceConfig, target int) string {
	for _, p := range svc.Ports {
		if int(p.Target) == target {
			return p.Published
		}
	}
	return ""
}

func envValue(svc types.ServiceConfig, key string) string {
	if v := svc.Environment[key]; v != nil {
		return *v
	}
	return ""
}

func volumeAt(svc types.ServiceConfig, target string) (types.ServiceVolumeConfig, bool) {
	for _, v := range svc.Volumes {
		if path.Clean(v.Target) == path.Clean(target) {
			return v, true
		}
	}
	return types.ServiceVolumeConfig{}, false
}

// splitEndpoint returns the host and port a variable points at: host:port for
// TEMPORAL_ADDRESS-style values, otherwise a URL.
func splitEndpoint(value string) (string, int, error) {
	if !strings.Contains(value, "://") {
		host, port, err := net.SplitHostPort(value)
		if err != nil {
			return "", 0, err
		}
		return host, atoi(port), nil
	}
	u, err := url.Parse(value)
	if err != nil {
		return "", 0, err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "postgres": "5432", "postgresql": "5432", "nats": "4222"}[u.Scheme]
	}
	if port == "" {
		return "", 0, errors.New("no port and no default port for scheme " + u.Scheme)
	}
	return u.Hostname(), atoi(port), nil
}

// checkEndpoint returns why value does not reach a port that a service of the
// stack listens on, or nil if it does.
func checkEndpoint(p *types.Project, key, value string) error {
	host, port, err := splitEndpoint(value)
	if err != nil {
		return fmt.Errorf("%s %q: %w", key, value, err)
	}
	target, ok := p.Services[host]
	if !ok {
		return fmt.Errorf("%s points at %q, which is not a service started by `docker compose up`", key, host)
	}
	if !listenPorts(target)[port] {
		return fmt.Errorf("%s uses port %d, which service %q does not expose (ports %v)", key, port, host, slices.Sorted(maps.Keys(listenPorts(target))))
	}
	return nil
}

// flagValue finds a Go- or nats-style flag (-name v, -name=v, --name v) in a
// command; found is true for a flag with no value too.
func flagValue(cmd []string, names ...string) (string, bool) {
	for i, arg := range cmd {
		for _, name := range names {
			for _, prefix := range []string{"-", "--"} {
				flag := prefix + name
				if arg == flag {
					if i+1 < len(cmd) && !strings.HasPrefix(cmd[i+1], "-") {
						return cmd[i+1], true
					}
					return "", true
				}
				if v, ok := strings.CutPrefix(arg, flag+"="); ok {
					return v, true
				}
			}
		}
	}
	return "", false
}

func pinned(image string) bool {
	_, tag, digest := splitImage(image)
	return digest != "" || (tag != "" && tag != "latest")
}

// splitImage splits repo[:tag][@digest], leaving a registry port in repo.
func splitImage(ref string) (repo, tag, digest string) {
	ref, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:], digest
	}
	return ref, "", digest
}

// releaseTag reports whether an image tag is for the given release: "1.26",
// "1.26.8", "1.26-alpine" are all for 1.26.
func releaseTag(tag, release string) bool {
	rest, ok := strings.CutPrefix(tag, release)
	return ok && (rest == "" || rest[0] == '.' || rest[0] == '-')
}

func goModVersion(t *testing.T, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go\s+(\d+\.\d+)`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return m[1]
}

// checkMainPackage fails the test unless pkg is a directory holding a main package.
func checkMainPackage(t *testing.T, root, pkg string) {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, "./")))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("package %s, built into the image, does not exist: %v", pkg, err)
		return
	}
	pkgClause := regexp.MustCompile(`(?m)^package\s+main\b`)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && pkgClause.Match(src) {
			return
		}
	}
	t.Errorf("%s has no non-test .go file declaring package main", pkg)
}

// searchAttributesInCode finds the temporal.NewSearchAttributeKey* calls in
// the module's non-test Go files: attribute name -> CLI type.
func searchAttributesInCode(t *testing.T, root string) map[string]string {
	t.Helper()
	cliType := map[string]string{
		"Keyword": "Keyword", "KeywordList": "KeywordList", "String": "Text",
		"Int64": "Int", "Float64": "Double", "Bool": "Bool", "Time": "Datetime",
	}
	call := regexp.MustCompile(`NewSearchAttributeKey(\w+)\(\s*"([^"]+)"\s*\)`)
	found := map[string]string{}
	repo, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	fsys := repo.FS()
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "testdata") {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			typ, ok := cliType[m[1]]
			if !ok {
				t.Errorf("%s: unknown search attribute constructor NewSearchAttributeKey%s", p, m[1])
				continue
			}
			found[m[2]] = typ
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func nonRoot(user string) bool {
	name, _, _ := strings.Cut(user, ":")
	return name != "" && name != "root" && name != "0"
}

func atoi(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return -1
	}
	return n
}

func normalizeSpace(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\\\n", " ")), " ")
}

func stripSQLComments(s string) string {
	s = regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(s, " ")
	return regexp.MustCompile(`--[^\n]*`).ReplaceAllString(s, " ")
}

// ---------------------------------------------------------------------------
// A Dockerfile reader: enough to follow stages, not a full parser (no
// heredocs, no variable expansion beyond what the checks above need).

type instruction struct {
	cmd  string // upper case
	args string // continuation lines joined
}

type stage struct {
	name   string // lower case; "" for an unnamed stage
	base   string // image or stage name after FROM
	instrs []instruction
}

type dockerfileStages struct{ stages []stage }

func parseDockerfile(text string) dockerfileStages {
	var (
		df      dockerfileStages
		pending strings.Builder
	)
	flush := func() {
		line := strings.TrimSpace(pending.String())
		pending.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			fields := strings.Fields(args)
			fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--") })
			s := stage{}
			if len(fields) > 0 {
				s.base = fields[0]
			}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = strings.ToLower(fields[2])
			}
			df.stages = append(df.stages, s)
			return
		}
		if len(df.stages) > 0 {
			last := &df.stages[len(df.stages)-1]
			last.instrs = append(last.instrs, instruction{cmd: cmd, args: args})
		}
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments (and parser directives), also inside continuations
		}
		if body, cont := strings.CutSuffix(strings.TrimRight(line, " \t\r"), "\\"); cont {
			pending.WriteString(body)
			pending.WriteString(" ")
			continue
		}
		pending.WriteString(line)
		flush()
	}
	flush()
	return df
}

func (d dockerfileStages) byName(name string) (stage, bool) {
	for _, s := range d.stages {
		if s.name != "" && s.name == strings.ToLower(name) {
			return s, true
		}
	}
	return stage{}, false
}

// target returns the stage a build target names, or the last stage when name is "".
func (d dockerfileStages) target(name string) (stage, bool) {
	if name == "" {
		if len(d.stages) == 0 {
			return stage{}, false
		}
		return d.stages[len(d.stages)-1], true
	}
	return d.byName(name)
}

// chain is s and the stages it is built on, base first.
func (d dockerfileStages) chain(s stage) []stage {
	out := []stage{s}
	for i := 0; i < len(d.stages); i++ { // bounded: a chain cannot be longer than the file
		parent, ok := d.byName(out[0].base)
		if !ok {
			break
		}
		out = append([]stage{parent}, out...)
	}
	return out
}

func (d dockerfileStages) rootImage(s stage) string { return d.chain(s)[0].base }

func (d dockerfileStages) stageRunning(sub string) (stage, bool) {
	for _, s := range d.stages {
		for _, in := range s.instrs {
			if in.cmd == "RUN" && strings.Contains(in.args, sub) {
				return s, true
			}
		}
	}
	return stage{}, false
}

// last returns the args of the last cmd instruction in s's chain.
func (d dockerfileStages) last(s stage, cmd string) (string, bool) {
	var args string
	found := false
	for _, st := range d.chain(s) {
		for _, in := range st.instrs {
			if in.cmd == cmd {
				args, found = in.args, true
			}
		}
	}
	return args, found
}

func (d dockerfileStages) entrypoint(s stage) []string {
	args, ok := d.last(s, "ENTRYPOINT")
	if !ok {
		return nil
	}
	var exec []string
	if err := json.Unmarshal([]byte(args), &exec); err == nil {
		return exec
	}
	return []string{"/bin/sh", "-c", args}
}

func (d dockerfileStages) user(s stage) string {
	u, _ := d.last(s, "USER")
	return u
}

func (d dockerfileStages) hasEnv(s stage, key, value string) bool {
	for _, st := range d.chain(s) {
		for _, in := range st.instrs {
			if in.cmd == "ENV" && slices.Contains(strings.Fields(in.args), key+"="+value) {
				return true
			}
		}
	}
	return false
}

// copiesFrom reports whether s's chain copies src (or a directory holding it)
// out of stage from so that it lands at dst.
func (d dockerfileStages) copiesFrom(s stage, from, src, dst string) bool {
	if src == "" {
		return false
	}
	for _, st := range d.chain(s) {
		for _, in := range st.instrs {
			if in.cmd != "COPY" || !slices.Contains(strings.Fields(in.args), "--from="+from) {
				continue
			}
			paths := copyArgs(in.args)
			if len(paths) < 2 {
				continue
			}
			dest := paths[len(paths)-1]
			for _, p := range paths[:len(paths)-1] {
				switch {
				case path.Clean(p) == path.Clean(src):
					if path.Clean(dest) == dst || (strings.HasSuffix(dest, "/") && path.Join(dest, path.Base(src)) == dst) {
						return true
					}
				case strings.HasSuffix(p, "/") && strings.HasPrefix(src, p):
					if path.Join(dest, strings.TrimPrefix(src, p)) == dst {
						return true
					}
				}
			}
		}
	}
	return false
}

// copyArgs drops the --flags of a COPY.
func copyArgs(args string) []string {
	return slices.DeleteFunc(strings.Fields(args), func(f string) bool { return strings.HasPrefix(f, "--") })
}

// goBuildCommands splits a RUN into its shell commands and returns the argv
// of those that are `go build`.
func goBuildCommands(run string) [][]string {
	var out [][]string
	for _, part := range regexp.MustCompile(`&&|;|\|\|`).Split(run, -1) {
		argv := shellFields(part)
		for i := 0; i+1 < len(argv); i++ {
			if argv[i] == "go" && argv[i+1] == "build" {
				out = append(out, argv[i:])
				break
			}
		}
	}
	return out
}

// shellFields splits on blanks, honoring simple single and double quotes.
func shellFields(s string) []string {
	var (
		out   []string
		cur   strings.Builder
		quote rune
		inTok bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inTok = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out
}

// optionValue returns the value of a go command flag given as -f v or -f=v.
func optionValue(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// buildPackages returns the ./relative package arguments of a go build argv.
func buildPackages(argv []string) []string {
	var pkgs []string
	for i, a := range argv {
		if i > 0 && strings.HasPrefix(argv[i-1], "-") && !strings.Contains(argv[i-1], "=") && takesValue(argv[i-1]) {
			continue
		}
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, strings.TrimSuffix(a, "/"))
		}
	}
	return pkgs
}

func takesValue(flag string) bool {
	switch strings.TrimLeft(flag, "-") {
	case "o", "ldflags", "gcflags", "asmflags", "tags", "mod", "modfile", "overlay", "pgo", "p", "buildmode", "installsuffix", "pkgdir", "toolexec":
		return true
	}
	return false
}

// ---------------------------------------------------------------------------
// .dockerignore matching: patterns are relative to the context root, match a
// path or any directory above it, ** spans directories and later ! patterns
// re-include.

type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

type dockerignoreRules []ignoreRule

func parseDockerignore(text string) dockerignoreRules {
	var rules dockerignoreRules
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		line = strings.TrimPrefix(line, "!")
		line = strings.TrimPrefix(path.Clean("/"+line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		rules = append(rules, ignoreRule{re: regexp.MustCompile(re.String()), negate: negate})
	}
	return rules
}

func (rules dockerignoreRules) excludes(p string) bool {
	excluded := false
	for _, r := range rules {
		for q := p; q != "." && q != "/" && q != ""; q = path.Dir(q) {
			if r.re.MatchString(q) {
				excluded = !r.negate
				break
			}
		}
	}
	return excluded
}
