package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
)

func TestOperationHasNoIdentifiers(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/v1/payment_intents", "POST /v1/payment_intents"},
		{"POST", "/v1/payment_intents/pi_3Qx9a/confirm", "POST /v1/payment_intents/{id}/confirm"},
		{"GET", "/v1/payment_intents/pi_abc", "GET /v1/payment_intents/{id}"},
		{"GET", "/v1/payment_intents/search", "GET /v1/payment_intents/search"},
		{"POST", "/v3/mail/send", "POST /v3/mail/send"},
		{"GET", "/v3/messages/a1b2c3", "GET /v3/messages/{id}"},
		{"GET", "/v3/suppression/bounces/someone@example.com", "GET /v3/suppression/bounces/{id}"},
	} {
		if got := metrics.Operation(tc.method, tc.path); got != tc.want {
			t.Errorf("Operation(%s %s) = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestTransportTimesRequestsByStatusClass(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/confirm") {
			w.WriteHeader(http.StatusPaymentRequired)
		}
	}))
	defer srv.Close()
	c := m.InstrumentClient(metrics.ProviderStripe, nil)
	post := func(url string) error {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	for _, p := range []string{"/v1/payment_intents", "/v1/payment_intents/pi_1/confirm", "/v1/payment_intents/pi_2/confirm"} {
		if err := post(srv.URL + p); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()
	if err := post(srv.URL + "/v1/payment_intents"); err == nil {
		t.Fatal("a closed server answered")
	}
	counts := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameProviderDuration {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var op, class string
			for _, l := range mm.GetLabel() {
				switch l.GetName() {
				case "operation":
					op = l.GetValue()
				case "status_class":
					class = l.GetValue()
				}
			}
			counts[op+" "+class] = mm.GetHistogram().GetSampleCount()
		}
	}
	for k, n := range map[string]uint64{
		"POST /v1/payment_intents 2xx":              1,
		"POST /v1/payment_intents/{id}/confirm 4xx": 2,
		"POST /v1/payment_intents error":            1,
	} {
		if counts[k] != n {
			t.Errorf("%s: %d samples, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}

func TestNilMetricsCountNothing(t *testing.T) {
	var m *metrics.Metrics
	m.IntakeDecision("order-placed", metrics.DecisionStarted)
	m.EffectOutcome(metrics.EffectPayment, metrics.ResultPaid)
	if m.Transport("stripe", http.DefaultTransport) != http.DefaultTransport {
		t.Fatal("a nil Metrics wrapped the transport")
	}
}

type fakeBacklog struct {
	b   store.Backlog
	err error
}

func (f fakeBacklog) Backlog(context.Context) (store.Backlog, error) { return f.b, f.err }

func TestBacklogIsReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	src := &fakeBacklog{b: store.Backlog{
		InboxPending: 3, InboxOldestPendingAge: 42, OutboxUnpublished: 2, OutboxOldestAge: 7,
		QuarantineByReason: map[string]int64{"invalid": 5},
		PaymentsOpen:       map[string]int64{"unknown": 1, "processing": 0, "unexpected": 0},
	}}
	metrics.RegisterBacklog(reg, src, 0, nil)
	metrics.RegisterRetentionHeadroom(reg, 30*24*3600e9, 24*3600e9)
	expected := `
# HELP effectively_inbox_pending Inbox rows whose workflow is not started yet.
# TYPE effectively_inbox_pending gauge
effectively_inbox_pending 3
# HELP effectively_payments_open Payments waiting for the provider or an operator, by state (unknown, processing, unexpected).
# TYPE effectively_payments_open gauge
effectively_payments_open{state="processing"} 0
effectively_payments_open{state="unexpected"} 0
effectively_payments_open{state="unknown"} 1
# HELP effectively_quarantine_rows Quarantined messages not retried yet, by reason.
# TYPE effectively_quarantine_rows gauge
effectively_quarantine_rows{reason="invalid"} 5
# HELP effectively_retention_headroom_seconds Configured retention minus the redelivery horizon, in seconds.
# TYPE effectively_retention_headroom_seconds gauge
effectively_retention_headroom_seconds 2.5056e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		metrics.NameInboxPending, metrics.NamePaymentsOpen, metrics.NameQuarantineRows, metrics.NameRetentionHeadroom); err != nil {
		t.Fatal(err)
	}
	// A failed read leaves the gauges out and says so.
	src.err = errors.New("database down")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP effectively_backlog_up 1 when the backlog gauges could be read from Postgres in this scrape.
# TYPE effectively_backlog_up gauge
effectively_backlog_up 0
`), "effectively_backlog_up", metrics.NameInboxPending); err != nil {
		t.Fatal(err)
	}
}
