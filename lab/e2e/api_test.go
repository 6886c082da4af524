package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

const apiToken = "tok_e2e_checkout_0123456789"

func apiOrder(id string, orderID, amount int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":%d,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`, id, orderID, amount)
}

func apiTokensFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "api-tokens")
	if err := os.WriteFile(p, []byte("checkout "+httpapi.HashToken(apiToken)+" order.placed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// exchange is one request and its answer, bodies kept for the validator.
type exchange struct {
	req     *http.Request
	reqBody []byte
	resp    *http.Response
	body    []byte
}

func apiCall(t *testing.T, base, method, path string, body []byte, header ...string) (exchange, error) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return exchange{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return exchange{}, err
	}
	return exchange{req: req, reqBody: body, resp: resp, body: b}, nil
}

// TestAPIConformsToOpenAPI sends real requests to the real listener, one
// per documented status, and validates each request and answer against
// docs/openapi.yaml with libopenapi-validator (OpenAPI 3.1).
func TestAPIConformsToOpenAPI(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("openapi.yaml: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}

	s := testenv.NewStack(t, testenv.StackOptions{})
	api, err := httpapi.New(s.Intake, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: apiTokensFile(t), TokenRate: 1000, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeAPI(t, api)
	base := "http://" + addr

	type call struct {
		method, path string
		body         []byte
		header       []string
		want         int
	}
	calls := []call{
		{"POST", "/v1/messages", apiOrder("evt_oa1", 7001, 1200), []string{"Idempotency-Key", "evt_oa1", "Prefer", "wait=20"}, 202},
		{"POST", "/v1/messages", apiOrder("evt_oa1", 7001, 1200), []string{"Idempotency-Key", "evt_oa1"}, 202},
		{"GET", "/v1/messages/order-placed/evt_oa1", nil, nil, 200},
		{"POST", "/v1/messages", apiOrder("evt_oa1", 7001, 99), []string{"Idempotency-Key", "evt_oa1"}, 422},
		{"POST", "/v1/messages", []byte(`{"id":"evt_oa2","type":"order.placed","data":{}}`), []string{"Idempotency-Key", "evt_oa2"}, 400},
		{"POST", "/v1/messages", apiOrder("evt_oa3", 7003, 1), nil, 400},
		{"POST", "/v1/messages", append(apiOrder("evt_oa4", 7004, 1), bytes.Repeat([]byte(" "), 70<<10)...), []string{"Idempotency-Key", "evt_oa4"}, 413},
		{"POST", "/v1/messages", apiOrder("evt_oa5", 7005, 1), []string{"Idempotency-Key", "evt_oa5", "Authorization", "Bearer nope"}, 401},
		{"POST", "/v1/messages", []byte(`{"id":"evt_oa6","type":"order.refund_requested","data":{}}`), []string{"Idempotency-Key", "evt_oa6"}, 403},
		{"GET", "/v1/messages/order-placed/evt_none", nil, nil, 404},
	}
	for _, c := range calls {
		x, err := apiCall(t, base, c.method, c.path, c.body, c.header...)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if x.resp.StatusCode != c.want {
			t.Fatalf("%s %s %v: status %d, want %d: %s", c.method, c.path, c.header, x.resp.StatusCode, c.want, x.body)
		}
		x.req.Body = io.NopCloser(bytes.NewReader(x.reqBody))
		x.resp.Body = io.NopCloser(bytes.NewReader(x.body))
		validate := v.ValidateHttpRequestResponse
		if x.req.Header.Get("Idempotency-Key") == "" {
			// The request breaks the contract on purpose: only the answer
			// is checked.
			validate = v.ValidateHttpResponse
		}
		if ok, verrs := validate(x.req, x.resp); !ok {
			for _, e := range verrs {
				t.Errorf("%s %s → %d: %s: %s", c.method, c.path, x.resp.StatusCode, e.Message, e.Reason)
			}
		}
	}
	// 429 from an API with a tiny rate.
	slow, err := httpapi.New(s.Intake, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: apiTokensFile(t), TokenRate: 0.5, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	saddr, _ := testenv.ServeAPI(t, slow)
	var limited exchange
	for range 3 {
		if limited, err = apiCall(t, "http://"+saddr, "GET", "/v1/messages/order-placed/evt_oa1", nil); err != nil {
			t.Fatal(err)
		}
	}
	if limited.resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request at 0.5/s: %d", limited.resp.StatusCode)
	}
	limited.req.Body, limited.resp.Body = io.NopCloser(bytes.NewReader(nil)), io.NopCloser(bytes.NewReader(limited.body))
	if ok, verrs := v.ValidateHttpRequestResponse(limited.req, limited.resp); !ok {
		for _, e := range verrs {
			t.Errorf("429: %s: %s", e.Message, e.Reason)
		}
	}

	// The validator is not lenient: an answer with a field the schema does
	// not have fails.
	x, _ := apiCall(t, base, "GET", "/v1/messages/order-placed/evt_oa1", nil)
	x.body = bytes.Replace(x.body, []byte(`"terminal"`), []byte(`"customer_email":"ada@example.com","terminal"`), 1)
	x.req.Body, x.resp.Body = io.NopCloser(bytes.NewReader(nil)), io.NopCloser(bytes.NewReader(x.body))
	if ok, _ := v.ValidateHttpRequestResponse(x.req, x.resp); ok {
		t.Fatal("an answer carrying customer_email validates: the schema does not guard the view")
	}
}

// TestWorkerAPIKilledAfterCommit runs the API in the worker process: the
// worker is killed (SIGKILL) after the inbox commit, before the answer; the
// client's retry to the restarted worker gets the first answer, replayed,
// and waits for paid; one charge. Then a SIGTERM while a request waits:
// the wait ends at once with terminal false, and the worker stops cleanly.
func TestWorkerAPIKilledAfterCommit(t *testing.T) {
	addr := freeLoopbackAddr(t)
	health := freeLoopbackAddr(t)
	s := newProcStack(t, "EFFECTIVELY_API_ADDR="+addr, "EFFECTIVELY_API_TOKENS_FILE="+apiTokensFile(t), "EFFECTIVELY_HEALTH_ADDR="+health)
	base := "http://" + addr
	p := s.start(t, failpoint.EnvVar+"="+failpoint.APIAfterInsert)
	waitReady(t, health, p)

	if _, err := apiCall(t, base, "POST", "/v1/messages", apiOrder("evt_k1", 8001, 1500), "Idempotency-Key", "evt_k1"); err == nil {
		t.Fatal("the request got an answer: the failpoint did not kill the worker")
	}
	killedAt(t, p, failpoint.APIAfterInsert)
	st, err := s.store.Status(context.Background(), "order-placed", "evt_k1")
	if err != nil || st.Inbox == nil {
		t.Fatalf("the inbox row is not committed before the kill: %+v %v", st.Inbox, err)
	}

	p2 := s.start(t)
	waitReady(t, health, p2)
	x, err := apiCall(t, base, "POST", "/v1/messages", apiOrder("evt_k1", 8001, 1500), "Idempotency-Key", "evt_k1", "Prefer", "wait=30")
	if err != nil {
		t.Fatal(err)
	}
	var acc httpapi.Accepted
	if err := json.Unmarshal(x.body, &acc); err != nil || x.resp.StatusCode != 202 || x.resp.Header.Get("Idempotent-Replayed") != "true" ||
		acc.Outcome != store.OutcomePaid || acc.Terminal == nil || !*acc.Terminal {
		t.Fatalf("retry after the kill: %d %v %s", x.resp.StatusCode, x.resp.Header, x.body)
	}
	if n := s.sims.Stripe.Stats().ChargesByMessage["evt_k1"]; n != 1 {
		t.Fatalf("charges of evt_k1: %d, want 1", n)
	}

	// SIGTERM during a wait: a slow Stripe keeps the workflow open.
	s.sims.Stripe.SetLatency(20 * time.Second)
	defer s.sims.Stripe.SetLatency(0)
	type result struct {
		x   exchange
		err error
	}
	got := make(chan result, 1)
	go func() {
		x, err := apiCall(t, base, "POST", "/v1/messages", apiOrder("evt_k2", 8002, 1600), "Idempotency-Key", "evt_k2", "Prefer", "wait=30")
		got <- result{x, err}
	}()
	testenv.Eventually(t, 10*time.Second, "evt_k2 recorded", func() bool {
		st, err := s.store.Status(context.Background(), "order-placed", "evt_k2")
		return err == nil && st.Inbox != nil
	})
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	p2.Stop(30 * time.Second)
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiting request was cut at SIGTERM: %v", r.err)
	}
	if err := json.Unmarshal(r.x.body, &acc); err != nil || r.x.resp.StatusCode != 202 || acc.Terminal == nil || *acc.Terminal {
		t.Fatalf("answer at SIGTERM: %d %s", r.x.resp.StatusCode, r.x.body)
	}
	if p2.Err() != nil {
		t.Fatalf("the worker did not stop cleanly: %v", p2.Err())
	}
	t.Logf("SIGTERM with a waiter: stopped in %s", time.Since(start).Round(time.Millisecond))
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits for /readyz, which covers the API listener, to answer 200.
func waitReady(t *testing.T, health string, p interface{ Logs() string }) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				if !strings.Contains(string(b), `"api"`) {
					t.Fatalf("/readyz does not cover the API: %s", b)
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the worker never became ready; logs:\n%s", p.Logs())
}

// TestAPITraceContinues: a client's traceparent is continued by the API's
// span, into the workflow, its activities and the provider calls.
func TestAPITraceContinues(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	tracing.Install(tp)
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	ti, err := tracing.TemporalInterceptor()
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.StackOptions{Interceptors: []interceptor.ClientInterceptor{ti}})
	api, err := httpapi.New(s.Intake, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: apiTokensFile(t), Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeAPI(t, api)

	cctx, client := tp.Tracer("checkout").Start(context.Background(), "checkout", trace.WithSpanKind(trace.SpanKindClient))
	h := http.Header{}
	tracing.Propagator.Inject(cctx, propagation.HeaderCarrier(h))
	client.End()
	x, err := apiCall(t, "http://"+addr, "POST", "/v1/messages", apiOrder("evt_tr1", 7101, 4200),
		"Idempotency-Key", "evt_tr1", "Prefer", "wait=20", "traceparent", h.Get("traceparent"))
	if err != nil || x.resp.StatusCode != 202 {
		t.Fatalf("POST: %v %s", err, x.body)
	}
	want := []string{"POST /v1/messages", "StartWorkflow:" + workflows.OrderPlacedName, "RunWorkflow:" + workflows.OrderPlacedName,
		"RunActivity:ChargeOrder", "stripe POST /v1/payment_intents"}
	tid := client.SpanContext().TraceID()
	var got []string
	testenv.Eventually(t, 20*time.Second, "the request's trace reaches Stripe", func() bool {
		got = got[:0]
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID() == tid {
				got = append(got, sp.Name)
			}
		}
		for _, w := range want {
			if !slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, w) }) {
				return false
			}
		}
		return true
	})
}
