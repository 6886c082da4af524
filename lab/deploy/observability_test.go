package deploy

import (
	"encoding/json"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	prometheusConfig = "deploy/prometheus/prometheus.yml"
	alertRules       = "deploy/prometheus/alerts.yml"
	alertRuleTests   = "deploy/prometheus/alerts_test.yml"
	grafanaDashboard = "deploy/grafana/dashboards/effectively.json"
	grafanaDatasrc   = "deploy/grafana/provisioning/datasources/prometheus.yml"
	grafanaProvider  = "deploy/grafana/provisioning/dashboards/effectively.yml"
)

// promtool returns the path of Prometheus' promtool. It is never skipped:
// .ci/run installs Debian's prometheus package, which brings it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is required: apt-get install prometheus (Debian's package; .ci/run installs it)")
	}
	return p
}

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// TestPromtool checks the Prometheus configuration and the alert rules with
// Prometheus' own tool, and runs the rules' unit tests (alerts_test.yml:
// each alert fires on the series that should raise it, not on others).
func TestPromtool(t *testing.T) {
	pt := promtool(t)
	runTool(t, pt, "check", "config", prometheusConfig)
	runTool(t, pt, "check", "rules", alertRules)
	runTool(t, pt, "test", "rules", alertRuleTests)
}

// promConfig is the part of prometheus.yml the checks read.
type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// TestComposeObservability checks that Prometheus scrapes the worker where
// it serves /metrics and Temporal where it serves its metrics, that Grafana
// is provisioned with that Prometheus and the dashboard in the repository,
// that the files the services mount exist, and that the new services are
// published on loopback only.
func TestComposeObservability(t *testing.T) {
	p := load(t)
	root := repoRoot(t)
	svc := func(name string) (s struct {
		env    map[string]string
		mounts map[string]string // target -> source (relative to the root)
		ports  []string          // host_ip:published:target
	}) {
		sc, ok := p.Services[name]
		if !ok {
			t.Fatalf("service %q is missing or not started by `docker compose up`", name)
		}
		s.env, s.mounts = map[string]string{}, map[string]string{}
		for k, v := range sc.Environment {
			if v != nil {
				s.env[k] = *v
			}
		}
		for _, v := range sc.Volumes {
			if v.Type == "bind" {
				rel, err := filepath.Rel(root, v.Source)
				if err != nil {
					t.Fatal(err)
				}
				s.mounts[v.Target] = filepath.ToSlash(rel)
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("service %q mounts %s, which does not exist: %v", name, rel, err)
				}
			}
		}
		for _, port := range sc.Ports {
			s.ports = append(s.ports, port.HostIP+":"+port.Published+":"+strconv.Itoa(int(port.Target)))
		}
		return s
	}
	prom, graf := svc("prometheus"), svc("grafana")
	for name, s := range map[string][]string{"prometheus": prom.ports, "grafana": graf.ports, "jaeger": svc("jaeger").ports} {
		for _, port := range s {
			if !strings.HasPrefix(port, "127.0.0.1:") {
				t.Errorf("service %q publishes %s on every interface; bind it to 127.0.0.1", name, port)
			}
		}
	}
	if prom.mounts["/etc/prometheus/prometheus.yml"] != prometheusConfig {
		t.Errorf("prometheus does not mount %s at /etc/prometheus/prometheus.yml (mounts %v)", prometheusConfig, prom.mounts)
	}

	var cfg promConfig
	readYAML(t, prometheusConfig, &cfg)
	for _, rf := range cfg.RuleFiles {
		if prom.mounts[filepath.ToSlash(filepath.Join("/etc/prometheus", rf))] != filepath.ToSlash(filepath.Join(filepath.Dir(prometheusConfig), rf)) {
			t.Errorf("rule file %s is not mounted next to the configuration in the prometheus service (mounts %v)", rf, prom.mounts)
		}
	}
	targets := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets[sc.JobName] = append(targets[sc.JobName], st.Targets...)
		}
		if sc.JobName == "effectively-worker" && sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job effectively-worker scrapes %s, want /metrics", sc.MetricsPath)
		}
	}
	// The worker serves /metrics on its health listener.
	_, healthPort, _ := net.SplitHostPort(svc("worker").env["EFFECTIVELY_HEALTH_ADDR"])
	if want := "worker:" + healthPort; !slices.Contains(targets["effectively-worker"], want) {
		t.Errorf("job effectively-worker scrapes %v, want %s (the worker's EFFECTIVELY_HEALTH_ADDR)", targets["effectively-worker"], want)
	}
	// Temporal's server serves its metrics where PROMETHEUS_ENDPOINT says.
	_, temporalPort, err := net.SplitHostPort(svc("temporal").env["PROMETHEUS_ENDPOINT"])
	if err != nil {
		t.Errorf("temporal: PROMETHEUS_ENDPOINT is not host:port: %v", err)
	}
	if want := "temporal:" + temporalPort; !slices.Contains(targets["temporal"], want) {
		t.Errorf("job temporal scrapes %v, want %s (temporal's PROMETHEUS_ENDPOINT)", targets["temporal"], want)
	}

	// Grafana: the datasource is the prometheus service, the dashboards
	// folder the provider reads is the one mounted from the repository.
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, grafanaDatasrc, &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].URL != "http://prometheus:9090" || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("grafana datasources %+v: want one prometheus datasource at http://prometheus:9090", ds.Datasources)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, grafanaProvider, &prov)
	if graf.mounts["/etc/grafana/provisioning"] != "deploy/grafana/provisioning" {
		t.Errorf("grafana does not mount deploy/grafana/provisioning at /etc/grafana/provisioning (mounts %v)", graf.mounts)
	}
	if len(prov.Providers) != 1 || graf.mounts[prov.Providers[0].Options.Path] != filepath.ToSlash(filepath.Dir(grafanaDashboard)) {
		t.Errorf("grafana's dashboard provider reads %+v; the folder mounted from %s is not among them (mounts %v)", prov.Providers, filepath.Dir(grafanaDashboard), graf.mounts)
	}
	d := readDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "" && (len(ds.Datasources) == 0 || tg.Datasource.UID != ds.Datasources[0].UID) {
				t.Errorf("panel %q queries datasource %q, which is not provisioned", p.Title, tg.Datasource.UID)
			}
		}
	}
}

// dashboard is the part of the Grafana dashboard JSON the checks read.
type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr       string `json:"expr"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(grafanaDashboard)))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	return d
}

// dashboardExprs returns every query of the dashboard, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range readDashboard(t).Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

// alertExprs returns every alert's expression, by alert name.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, alertRules, &rules)
	out := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// TestDashboardAndAlertsUseExportedMetrics checks that every metric the
// dashboard and the alert rules query is one the worker exports
// (registerWorkerMetrics), and that the dashboard shows every one of them.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	exported := exportedMetricNames(t)
	used := map[string]bool{}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			if bad := unknownMetrics(e, exported); len(bad) > 0 {
				t.Errorf("dashboard panel %q queries %v, which the worker does not export", title, bad)
			}
			if len(metricRef.FindAllString(e, -1)) == 0 {
				t.Errorf("dashboard panel %q queries none of the worker's metrics: %s", title, e)
			}
			for _, m := range metricRef.FindAllString(e, -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
						m = b
					}
				}
				used[m] = true
			}
		}
	}
	for name := range exported {
		if strings.HasPrefix(name, "effectively_") && !used[name] {
			t.Errorf("the worker exports %s, which no dashboard panel shows", name)
		}
	}
	alerts := alertExprs(t)
	if len(alerts) == 0 {
		t.Fatal("no alert rules")
	}
	for name, e := range alerts {
		if bad := unknownMetrics(e, exported); len(bad) > 0 {
			t.Errorf("alert %s queries %v, which the worker does not export", name, bad)
		}
	}
	// What issue 10 asks the alerts to cover.
	for _, want := range []string{
		`effectively_payments_open{state="unknown"}`,
		`effectively_quarantine_rows`,
		`effectively_inbox_oldest_pending_age_seconds`,
		`effectively_retention_headroom_seconds`,
		`effectively_webhook_requests_total{result="bad_signature"}`,
	} {
		if !slices.ContainsFunc(slices.Collect(maps.Values(alerts)), func(e string) bool { return strings.Contains(e, want) }) {
			t.Errorf("no alert watches %s", want)
		}
	}
}

// grafanaVars replaces the Grafana variables the dashboard uses with a
// value Grafana could give them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s")
