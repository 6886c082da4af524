package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/testenv"
)

// TestPrometheusReadsDedupCounter runs a real Prometheus (Debian's
// package) that scrapes the worker's metrics endpoint and loads the
// repository's alert rules, puts one message twice on JetStream through a
// real consumer, and reads the duplicate it counted back through
// Prometheus' HTTP API. It also has Prometheus evaluate every dashboard and
// alert expression: each must be valid PromQL.
// The endpoint serves a registry built by internal/adapter/metrics, as the
// worker's /metrics does, that the consumer counts its decisions into.
func TestPrometheusReadsDedupCounter(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is required: apt-get install prometheus (Debian's package; .ci/run installs it)")
	}
	s := testenv.NewStack(t, testenv.StackOptions{})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	reg := prometheus.NewRegistry()
	p := s.StartProcessWithMetrics(t, j, j.ConsumerConfig(t, 5*time.Second, 5), intake.DispatcherConfig{}, metrics.New(reg))
	metricsSrv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(metricsSrv.Close)

	promURL := startPrometheus(t, promBin, metricsSrv.Listener.Addr().String())

	// The same message twice, without Nats-Msg-Id: the broker stores both,
	// the inbox recognises the second.
	raw := []byte(`{"id": "evt_prom1", "type": "order.placed", "data": {"order_id": 7001, "amount": 500, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`)
	j.Publish(t, raw, "")
	j.Publish(t, raw, "")

	query := fmt.Sprintf(`effectively_intake_decisions_total{consumer=%q,decision="duplicate"}`, message.ConsumerOrderPlaced)
	var (
		got   float64
		found bool
	)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if got, found = promQuery(t, promURL, query); found && got == 1 {
			break
		}
		if time.Now().After(deadline) {
			var targets struct {
				Data struct {
					ActiveTargets []struct {
						ScrapeURL, Health, LastError string
					}
				}
			}
			promGet(t, promURL, "/api/v1/targets", nil, &targets)
			t.Fatalf("Prometheus reports %s = %v (found %v), want 1; the consumer counted %+v; targets %+v", query, got, found, p.Consumer.Stats(), targets.Data.ActiveTargets)
		}
	}
	if started, ok := promQuery(t, promURL, `sum(effectively_intake_decisions_total{decision="started"})`); !ok || started != 1 {
		t.Errorf("started = %v (found %v), want 1", started, ok)
	}

	// Every dashboard and alert expression is valid PromQL for this
	// Prometheus.
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			if err := promCheck(t, promURL, e); err != nil {
				t.Errorf("dashboard panel %q: %v", title, err)
			}
		}
	}
	for name, e := range alertExprs(t) {
		if err := promCheck(t, promURL, e); err != nil {
			t.Errorf("alert %s: %v", name, err)
		}
	}
	// The rules loaded and evaluate without error.
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
	}
	testenv.Eventually(t, 20*time.Second, "the alert rules to be evaluated", func() bool {
		promGet(t, promURL, "/api/v1/rules", nil, &rules)
		n := 0
		for _, g := range rules.Data.Groups {
			for _, r := range g.Rules {
				if r.Health == "ok" {
					n++
				}
			}
		}
		return n > 0 && n == len(alertExprs(t))
	})
	t.Logf("Prometheus read effectively_intake_decisions_total{decision=\"duplicate\"} = %v", got)
}

// startPrometheus runs Prometheus with a configuration that scrapes target
// every 200ms as job effectively-worker and loads the repository's alert
// rules; it returns its URL and stops it when t ends.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	rules := filepath.Join(repoRoot(t), filepath.FromSlash(alertRules))
	cfg := fmt.Sprintf(`global:
  scrape_interval: 200ms
  evaluation_interval: 200ms
rule_files:
  - %q
scrape_configs:
  - job_name: effectively-worker
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	args := []string{
		"--config.file=" + cfgPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn",
	}
	cmd := exec.Command(bin, args...)
	out, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = out.Close()
		if t.Failed() {
			log, _ := os.ReadFile(out.Name())
			t.Logf("prometheus log:\n%s", log)
		}
	})
	u := "http://" + addr
	testenv.Eventually(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := http.Get(u + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return u
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promResponse is the envelope of Prometheus' HTTP API.
type promResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

func promGet(t *testing.T, base, path string, q url.Values, v any) promResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	var r promResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	if v != nil && r.Status == "success" {
		if err := json.Unmarshal(append(append([]byte(`{"data":`), r.Data...), '}'), v); err != nil {
			t.Fatalf("prometheus %s: %v", path, err)
		}
	}
	return r
}

// promQuery returns the value of an instant query with one result.
func promQuery(t *testing.T, base, query string) (float64, bool) {
	t.Helper()
	var res struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	r := promGet(t, base, "/api/v1/query", url.Values{"query": {query}}, &res)
	if r.Status != "success" || len(res.Data.Result) != 1 {
		return 0, false
	}
	s, _ := res.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// promCheck asks Prometheus to evaluate expr and returns its error, if any.
// Grafana's $__rate_interval is replaced by the value Grafana would use.
func promCheck(t *testing.T, base, expr string) error {
	t.Helper()
	q := grafanaVars.Replace(expr)
	r := promGet(t, base, "/api/v1/query", url.Values{"query": {q}}, nil)
	if r.Status != "success" {
		return fmt.Errorf("%s: %s: %s", q, r.ErrorType, r.Error)
	}
	return nil
}
