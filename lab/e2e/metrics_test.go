package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/tools/testenv"
)

// TestMetricsMatchPostgres runs the real worker binary, consuming from
// JetStream, over a mix of messages (new ones, copies, an invalid one, a
// declined card, two messages for one order), then scrapes its /metrics and
// checks every counter against what Postgres recorded. It also checks
// /readyz against the live dependencies, that the Temporal SDK's metrics
// are on the same endpoint, and that no label carries a message ID or an
// email address.
func TestMetricsMatchPostgres(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = testenv.NATSURL()
	addr := freeAddr(t)
	s.cfg.Extra = append(s.cfg.Extra, brokerEnv(j)...)
	s.start(t, "EFFECTIVELY_HEALTH_ADDR="+addr, "LOG_LEVEL=info")

	const n = 20
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_metrics_%02d", i)
		ids = append(ids, id)
		pm := "pm_card_visa"
		if i == 0 {
			pm = "pm_card_chargeDeclined"
		}
		j.Publish(t, order(id, int64(7000+i), pm), "")
		if i%4 == 1 {
			j.Publish(t, order(id, int64(7000+i), pm), "") // a producer's retry: a copy
		}
	}
	// Another message for an order already held: a business duplicate.
	ids = append(ids, "evt_metrics_other")
	j.Publish(t, order("evt_metrics_other", 7005, "pm_card_visa"), "")
	j.Publish(t, []byte(`{"id":"evt_metrics_bad","type":"order.placed","data":{"order_id":1,"amount":-5}}`), "")

	for _, id := range ids {
		s.waitOutcome(t, id)
	}
	ctx := context.Background()
	db := s.store.Pool()
	count := func(q string, args ...any) float64 {
		t.Helper()
		var v float64
		if err := db.QueryRow(ctx, q, args...).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return v
	}
	// The copies and the invalid message may still be in the consumer's
	// hands: wait until Postgres has seen every publish.
	testenv.Eventually(t, 30*time.Second, "every publish recorded", func() bool {
		return count(`SELECT count(*) + coalesce(sum(duplicates), 0) FROM inbox`) == float64(len(ids)+n/4) &&
			count(`SELECT count(*) FROM quarantine`) == 1
	})

	// A row whose start the workflow's first transaction could not mark
	// (SKIP LOCKED: a copy's insert held it) stays pending until a
	// Dispatcher pass after its MinAge (15 s) finds it started and marks
	// it. Name such rows, then wait for that pass.
	pending := func() []string {
		rows, err := db.Query(ctx, `SELECT message_id || ' (' || duplicates || ' copies, received ' ||
			round(extract(epoch FROM now() - received_at)::numeric, 1) || ' s ago)' FROM inbox WHERE state = 'pending'`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if p := pending(); len(p) > 0 {
		t.Logf("inbox rows still pending after their outcomes: %v; waiting for the Dispatcher", p)
		testenv.Eventually(t, time.Minute, "no inbox row pending", func() bool { return len(pending()) == 0 })
	}

	fams := scrape(t, "http://"+addr+"/metrics")
	checks := []struct {
		what  string
		got   float64
		want  float64
		query string
	}{
		{"started", value(fams, metrics.NameIntakeDecisions, "decision", "started"), 0,
			`SELECT count(*) FROM inbox WHERE state = 'dispatched'`},
		{"duplicate", value(fams, metrics.NameIntakeDecisions, "decision", "duplicate"), 0,
			`SELECT coalesce(sum(duplicates), 0) FROM inbox`},
		{"invalid", value(fams, metrics.NameIntakeDecisions, "decision", "invalid"), 0,
			`SELECT count(*) FROM quarantine WHERE reason = 'invalid'`},
		{"business_duplicate", value(fams, metrics.NameIntakeDecisions, "decision", "business_duplicate"), 0,
			`SELECT count(*) FROM processed_messages WHERE outcome = 'business_duplicate'`},
		{"paid", value(fams, metrics.NameEffectOutcomes, "result", "paid"), 0,
			`SELECT count(*) FROM payments WHERE state = 'succeeded'`},
		{"declined", value(fams, metrics.NameEffectOutcomes, "result", "declined"), 0,
			`SELECT count(*) FROM payments WHERE state = 'failed'`},
		{"receipts sent", value(fams, metrics.NameEffectOutcomes, "result", "sent"), 0,
			`SELECT count(*) FROM effects WHERE kind = 'email' AND state = 'succeeded'`},
		{"sendgrid 2xx", histCount(fams, metrics.NameProviderDuration, "provider", "sendgrid"), 0,
			`SELECT count(*) FROM effects WHERE kind = 'email' AND state = 'succeeded'`},
		{"inbox pending", value(fams, metrics.NameInboxPending), 0,
			`SELECT count(*) FROM inbox WHERE state = 'pending'`},
		{"quarantine rows", value(fams, metrics.NameQuarantineRows, "reason", "invalid"), 0,
			`SELECT count(*) FROM quarantine WHERE reason = 'invalid' AND retried_at IS NULL`},
		{"open payments", value(fams, metrics.NamePaymentsOpen, "state", "unknown"), 0,
			`SELECT count(*) FROM payments WHERE state = 'unknown'`},
	}
	for _, c := range checks {
		c.want = count(c.query)
		t.Logf("%s: /metrics %v, Postgres %v", c.what, c.got, c.want)
		if c.got != c.want {
			t.Errorf("%s: /metrics says %v, Postgres %v", c.what, c.got, c.want)
		}
	}
	// The mix is what the test meant it to be, so the equalities above say
	// something.
	if got := value(fams, metrics.NameIntakeDecisions, "decision", "started"); got != float64(len(ids)) {
		t.Errorf("started = %v, want %d", got, len(ids))
	}
	if got := value(fams, metrics.NameIntakeDecisions, "decision", "duplicate"); got != n/4 {
		t.Errorf("duplicates = %v, want %d", got, n/4)
	}
	if got := value(fams, metrics.NameEffectOutcomes, "result", "paid"); got != n-1 {
		t.Errorf("paid = %v, want %d", got, n-1)
	}
	if stripe := histCount(fams, metrics.NameProviderDuration, "provider", "stripe"); stripe < n {
		t.Errorf("stripe requests timed = %v, want at least %d", stripe, n)
	}
	if value(fams, metrics.NameRetentionHeadroom) <= 0 {
		t.Errorf("retention headroom = %v, want positive", value(fams, metrics.NameRetentionHeadroom))
	}
	temporal := 0
	for name := range fams {
		if strings.HasPrefix(name, "temporal_") {
			temporal++
		}
	}
	if temporal < 5 {
		t.Errorf("only %d temporal_ metric families on /metrics", temporal)
	}
	raw := get(t, "http://"+addr+"/metrics")
	for _, pii := range []string{"evt_metrics", "@example.com", "pm_card", "7005"} {
		if strings.Contains(raw, pii) {
			t.Errorf("/metrics carries %q", pii)
		}
	}

	// Ready against live dependencies, every check named.
	var rep health.Report
	if err := json.Unmarshal([]byte(get(t, "http://"+addr+"/readyz")), &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{health.CheckPostgres, health.CheckTemporal, health.CheckNATS} {
		if rep.Checks[c] != "ok" {
			t.Errorf("/readyz: %s = %q (%+v)", c, rep.Checks[c], rep)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	var lastErr error
	for range 50 { // the worker may still be starting its listener
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", url, lastErr)
	return ""
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(get(t, url)))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value sums the samples of a counter or gauge whose labels include the
// given name/value pairs.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, m := range matching(fams, name, labels) {
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// histCount sums the sample counts of a histogram's matching series.
func histCount(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	var sum float64
	for _, m := range matching(fams, name, labels) {
		sum += float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

func matching(fams map[string]*dto.MetricFamily, name string, labels []string) []*dto.Metric {
	f, ok := fams[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}
