package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/tools/testenv"
)

const (
	checkoutToken = "tok_checkout_0123456789abcdef"
	refundToken   = "tok_refunds_0123456789abcdef"
)

// env is a real stack (dev server, Postgres, simulators, worker) with the
// API served on a real listener, its Postgres reached through a proxy the
// test can cut or slow.
type env struct {
	s      *testenv.Stack
	api    *httpapi.API
	base   string
	proxy  *pgProxy
	tokens string
	client *http.Client
}

func writeTokens(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newEnv(t *testing.T, s *testenv.Stack, taskQueue string) *env {
	t.Helper()
	return newEnvRate(t, s, taskQueue, 200)
}

func newEnvRate(t *testing.T, s *testenv.Stack, taskQueue string, perSecond float64) *env {
	t.Helper()
	proxy, url := startPGProxy(t, s.DBURL)
	pool, err := store.Open(context.Background(), url, store.PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	in, err := intake.New(store.New(pool), s.Client, intake.Config{TaskQueue: taskQueue, Logger: testenv.Logger(t), EagerStart: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens,
		"# name hash types",
		"checkout "+httpapi.HashToken(checkoutToken)+" order.placed",
		"refunds "+httpapi.HashToken(refundToken)+" order.refund_requested")
	api, err := httpapi.New(in, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: tokens, TokenRate: perSecond, MaxWait: 20 * time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, ctx := testenv.ServeAPI(t, api)
	testenv.Eventually(t, 5*time.Second, "the API listener serves", func() bool { return api.Ready(ctx) == nil })
	return &env{s: s, api: api, base: "http://" + addr, proxy: proxy, tokens: tokens, client: &http.Client{Timeout: 60 * time.Second}}
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (a answer) problem(t *testing.T) httpapi.Problem {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json (status %d, body %s)", ct, a.code, a.body)
	}
	var p httpapi.Problem
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("problem document: %v: %s", err, a.body)
	}
	if p.Status != a.code {
		t.Fatalf("problem status %d, response status %d", p.Status, a.code)
	}
	return p
}

func (a answer) accepted(t *testing.T) httpapi.Accepted {
	t.Helper()
	if a.code != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", a.code, a.body)
	}
	var acc httpapi.Accepted
	if err := json.Unmarshal(a.body, &acc); err != nil {
		t.Fatalf("answer: %v: %s", err, a.body)
	}
	return acc
}

func (e *env) do(t *testing.T, method, path, token string, body []byte, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}
}

func (e *env) post(t *testing.T, key string, body []byte, header ...string) answer {
	t.Helper()
	return e.do(t, http.MethodPost, "/v1/messages", checkoutToken, body, append([]string{"Idempotency-Key", key}, header...)...)
}

func order(id string, orderID, amount int) []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":%d,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`, id, orderID, amount)
}

func inboxRow(t *testing.T, s *testenv.Stack, id string) store.MessageStatus {
	t.Helper()
	st, err := s.Store.Status(context.Background(), "order-placed", id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAPI(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	e := newEnv(t, s, s.TaskQueue)

	t.Run("first request, then retries get the first answer", func(t *testing.T) {
		first := e.post(t, "evt_h1", order("evt_h1", 9001, 1999))
		acc := first.accepted(t)
		if acc.Decision != httpapi.DecisionStarted || acc.MessageID != "evt_h1" || acc.Consumer != "order-placed" || acc.WorkflowID == "" {
			t.Fatalf("first answer %+v", acc)
		}
		if loc := first.header.Get("Location"); loc != "/v1/messages/order-placed/evt_h1" || acc.Location != loc {
			t.Fatalf("Location %q, body location %q", loc, acc.Location)
		}
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Fatal("the first answer says it is a replay")
		}
		again := e.post(t, "evt_h1", order("evt_h1", 9001, 1999))
		acc2 := again.accepted(t)
		if again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatal("a retry's answer does not say it is replayed")
		}
		acc2.Outcome, acc2.Terminal = "", nil // the retry may add the outcome
		if acc2 != acc {
			t.Fatalf("retry answered %+v, first %+v", acc2, acc)
		}
		// The body without an id, the key naming it: the same message.
		noID := []byte(`{"type":"order.placed","data":{"order_id":9001,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`)
		e.post(t, "evt_h1", noID).accepted(t)
		testenv.Eventually(t, 30*time.Second, "evt_h1 paid", func() bool { return inboxRow(t, s, "evt_h1").Processed != nil })
		st := inboxRow(t, s, "evt_h1")
		if st.Inbox == nil || st.Inbox.Duplicates != 2 || st.Inbox.Source != httpapi.Source {
			t.Fatalf("inbox row %+v, want one row from http with 2 duplicates", st.Inbox)
		}
		if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_h1"]; n != 1 {
			t.Fatalf("charges of evt_h1: %d, want 1", n)
		}
		third := e.post(t, "evt_h1", order("evt_h1", 9001, 1999)).accepted(t)
		if third.Outcome != store.OutcomePaid {
			t.Fatalf("a retry after the outcome answered outcome %q, want paid", third.Outcome)
		}
	})

	t.Run("concurrent retries start one workflow", func(t *testing.T) {
		const n = 16
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { codes[i] = e.post(t, "evt_h2", order("evt_h2", 9002, 500)).code })
		}
		wg.Wait()
		accepted := 0
		for _, c := range codes {
			switch c {
			case http.StatusAccepted:
				accepted++
			case http.StatusConflict:
			default:
				t.Fatalf("status %d among concurrent retries %v", c, codes)
			}
		}
		if accepted == 0 {
			t.Fatalf("no request accepted: %v", codes)
		}
		testenv.Eventually(t, 30*time.Second, "evt_h2 paid", func() bool { return inboxRow(t, s, "evt_h2").Processed != nil })
		if c := s.Sims.Stripe.Stats().ChargesByMessage["evt_h2"]; c != 1 {
			t.Fatalf("charges of evt_h2: %d, want 1", c)
		}
		if d := inboxRow(t, s, "evt_h2").Inbox.Duplicates; d != accepted-1 {
			t.Fatalf("inbox duplicates %d, accepted %d: each accepted retry is one copy", d, accepted)
		}
	})

	t.Run("the same key with another payload is 422 and quarantined", func(t *testing.T) {
		e.post(t, "evt_h3", order("evt_h3", 9003, 700)).accepted(t)
		a := e.post(t, "evt_h3", order("evt_h3", 9003, 70000))
		if a.code != http.StatusUnprocessableEntity {
			t.Fatalf("status %d, want 422: %s", a.code, a.body)
		}
		p := a.problem(t)
		if p.Type != "urn:effectively:problem:payload-mismatch" || p.QuarantineID == 0 || p.MessageID != "evt_h3" {
			t.Fatalf("problem %+v", p)
		}
		st := inboxRow(t, s, "evt_h3")
		if len(st.Quarantine) != 1 || st.Quarantine[0].Reason != store.ReasonPayloadMismatch || st.Quarantine[0].Source != httpapi.Source {
			t.Fatalf("quarantine %+v, want one payload_mismatch row from http", st.Quarantine)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		bad := []byte(`{"id":"evt_h4","type":"order.placed","data":{"order_id":9004,"amount":-5,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`)
		a := e.post(t, "evt_h4", bad)
		p := a.problem(t)
		if a.code != http.StatusBadRequest || p.Field != "data.amount" || p.Type != "urn:effectively:problem:invalid-message" || p.QuarantineID == 0 {
			t.Fatalf("invalid message: %d %+v", a.code, p)
		}
		if q := inboxRow(t, s, "evt_h4").Quarantine; len(q) != 1 || q[0].Reason != store.ReasonInvalid {
			t.Fatalf("quarantine of the invalid message: %+v", q)
		}
		if inboxRow(t, s, "evt_h4").Inbox != nil {
			t.Fatal("an invalid message reached the inbox")
		}

		// A token that may submit order.shipped, which no route knows.
		writeTokens(t, e.tokens, "checkout "+httpapi.HashToken(checkoutToken)+" order.placed,order.shipped",
			"refunds "+httpapi.HashToken(refundToken)+" order.refund_requested")
		httpapi.ForceReload(e.api.Tokens())
		a = e.post(t, "evt_h5", []byte(`{"id":"evt_h5","type":"order.shipped","data":{}}`))
		if p := a.problem(t); a.code != http.StatusBadRequest || p.Type != "urn:effectively:problem:unknown-type" || p.QuarantineID == 0 {
			t.Fatalf("unknown type: %d %+v", a.code, p)
		}

		big := bytes.Repeat([]byte(" "), 70<<10)
		if a := e.post(t, "evt_h6", append(order("evt_h6", 9006, 1), big...)); a.code != http.StatusRequestEntityTooLarge || a.problem(t).Type != "urn:effectively:problem:too-large" {
			t.Fatalf("too large: %d %s", a.code, a.body)
		}
		if a := e.do(t, http.MethodPost, "/v1/messages", checkoutToken, order("evt_h7", 9007, 1)); a.code != http.StatusBadRequest || a.problem(t).Type != "urn:effectively:problem:missing-idempotency-key" {
			t.Fatalf("no key: %d %s", a.code, a.body)
		}
		if a := e.post(t, "evt_other", order("evt_h7", 9007, 1)); a.code != http.StatusBadRequest || a.problem(t).Type != "urn:effectively:problem:idempotency-key-mismatch" {
			t.Fatalf("key differs from the id: %d %s", a.code, a.body)
		}
		if a := e.do(t, http.MethodPost, "/v1/messages", "", order("evt_h7", 9007, 1), "Idempotency-Key", "evt_h7"); a.code != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("no token: %d %s", a.code, a.body)
		}
		if a := e.do(t, http.MethodPost, "/v1/messages", "tok_unknown", order("evt_h7", 9007, 1), "Idempotency-Key", "evt_h7"); a.code != http.StatusUnauthorized {
			t.Fatalf("unknown token: %d %s", a.code, a.body)
		}
		// A refund token cannot charge.
		if a := e.do(t, http.MethodPost, "/v1/messages", refundToken, order("evt_h7", 9007, 1), "Idempotency-Key", "evt_h7"); a.code != http.StatusForbidden || a.problem(t).Type != "urn:effectively:problem:forbidden-type" {
			t.Fatalf("refund token charging: %d %s", a.code, a.body)
		}
		if a := e.do(t, http.MethodGet, "/v1/messages", checkoutToken, nil); a.code != http.StatusMethodNotAllowed || a.header.Get("Allow") != "POST" {
			t.Fatalf("GET /v1/messages: %d %v", a.code, a.header)
		}
		if a := e.do(t, http.MethodGet, "/v2/other", checkoutToken, nil); a.code != http.StatusNotFound || a.problem(t).Type != "urn:effectively:problem:not-found" {
			t.Fatalf("unknown path: %d", a.code)
		}
		if st := inboxRow(t, s, "evt_h7"); st.Known() {
			t.Fatalf("a refused request left a record: %+v", st)
		}
	})

	t.Run("tokens are rotated without a restart", func(t *testing.T) {
		const fresh = "tok_rotated_fedcba9876543210"
		writeTokens(t, e.tokens, "checkout2 "+httpapi.HashToken(fresh)+" order.placed",
			"refunds "+httpapi.HashToken(refundToken)+" order.refund_requested")
		httpapi.ForceReload(e.api.Tokens())
		if a := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h1", checkoutToken, nil); a.code != http.StatusUnauthorized {
			t.Fatalf("revoked token: %d", a.code)
		}
		if a := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h1", fresh, nil); a.code != http.StatusOK {
			t.Fatalf("new token: %d %s", a.code, a.body)
		}
		// A file that no longer parses keeps the tokens read before.
		writeTokens(t, e.tokens, "checkout2 not-a-hash order.placed")
		httpapi.ForceReload(e.api.Tokens())
		if a := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h1", fresh, nil); a.code != http.StatusOK {
			t.Fatalf("a broken file dropped the tokens: %d", a.code)
		}
		writeTokens(t, e.tokens, "checkout "+httpapi.HashToken(checkoutToken)+" order.placed",
			"refunds "+httpapi.HashToken(refundToken)+" order.refund_requested")
		httpapi.ForceReload(e.api.Tokens())
	})

	t.Run("Postgres cut: 503 with Retry-After, nothing recorded", func(t *testing.T) {
		e.proxy.Cut()
		a := e.post(t, "evt_h8", order("evt_h8", 9008, 300))
		if a.code != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || a.problem(t).Type != "urn:effectively:problem:unavailable" {
			t.Fatalf("with Postgres cut: %d Retry-After %q %s", a.code, a.header.Get("Retry-After"), a.body)
		}
		// Invalid input is not quarantined either: 503 too, since the
		// quarantine is in Postgres.
		bad := e.post(t, "evt_h8b", []byte(`{"id":"evt_h8b","type":"order.placed","data":{}}`))
		if bad.code != http.StatusServiceUnavailable {
			t.Fatalf("invalid message with Postgres cut: %d %s", bad.code, bad.body)
		}
		e.proxy.Restore()
		if st := inboxRow(t, s, "evt_h8"); st.Known() {
			t.Fatalf("a 503 left a record: %+v", st)
		}
		// A client retries a 503; the pool may hand out a connection the
		// cut killed before it notices.
		var retry answer
		for range 20 {
			if retry = e.post(t, "evt_h8", order("evt_h8", 9008, 300)); retry.code != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		retry.accepted(t)
		if retry.header.Get("Idempotent-Replayed") != "" {
			t.Fatal("the retry after a 503 was answered as a replay: the 503 had recorded it")
		}
	})

	t.Run("slow Postgres: concurrent retries conflict, one row", func(t *testing.T) {
		e.proxy.Slow(300 * time.Millisecond)
		defer e.proxy.Slow(0)
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[int]int{}
			fresh int
		)
		for range 6 {
			wg.Go(func() {
				a := e.post(t, "evt_h9", order("evt_h9", 9009, 400))
				mu.Lock()
				defer mu.Unlock()
				codes[a.code]++
				if a.code == http.StatusAccepted && a.header.Get("Idempotent-Replayed") == "" {
					fresh++
				}
				if a.code == http.StatusConflict && a.header.Get("Retry-After") == "" {
					t.Error("409 without Retry-After")
				}
			})
		}
		wg.Wait()
		if fresh != 1 || codes[http.StatusConflict] == 0 || codes[http.StatusAccepted]+codes[http.StatusConflict] != 6 {
			t.Fatalf("answers %v, first answers %d: want one first 202, the rest 409 (or replays)", codes, fresh)
		}
		testenv.Eventually(t, 30*time.Second, "evt_h9 paid", func() bool { return inboxRow(t, s, "evt_h9").Processed != nil })
		if c := s.Sims.Stripe.Stats().ChargesByMessage["evt_h9"]; c != 1 {
			t.Fatalf("charges of evt_h9: %d", c)
		}
	})

	t.Run("a wait sees paid", func(t *testing.T) {
		start := time.Now()
		a := e.post(t, "evt_h10", order("evt_h10", 9010, 2500), "Prefer", "wait=20")
		acc := a.accepted(t)
		if acc.Terminal == nil || !*acc.Terminal || acc.Outcome != store.OutcomePaid {
			t.Fatalf("after the wait: %s (took %s)", a.body, time.Since(start))
		}
		if a.header.Get("Preference-Applied") != "wait=20" {
			t.Fatalf("Preference-Applied %q", a.header.Get("Preference-Applied"))
		}
		g := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h10", checkoutToken, nil)
		if g.code != http.StatusOK {
			t.Fatalf("GET: %d %s", g.code, g.body)
		}
		var v httpapi.View
		if err := json.Unmarshal(g.body, &v); err != nil {
			t.Fatal(err)
		}
		if !v.Terminal || v.Outcome != store.OutcomePaid || v.Payment == nil || v.Payment.State != store.PaymentSucceeded || v.Order == nil || v.Order.Amount != 2500 || len(v.Effects) == 0 {
			t.Fatalf("GET view %s", g.body)
		}
		if bytes.Contains(g.body, []byte("ada@example.com")) || bytes.Contains(g.body, []byte("pm_card_visa")) {
			t.Fatalf("GET shows personal data: %s", g.body)
		}
		if a := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h10", refundToken, nil); a.code != http.StatusForbidden {
			t.Fatalf("a refund token reads a charge: %d", a.code)
		}
		// An unknown message is answered at once, wait or not: nothing polls for it.
		start = time.Now()
		if a := e.do(t, http.MethodGet, "/v1/messages/order-placed/evt_nothing", checkoutToken, nil, "Prefer", "wait=5"); a.code != http.StatusNotFound || a.problem(t).Type != "urn:effectively:problem:not-found" || time.Since(start) > 2*time.Second {
			t.Fatalf("unknown message: %d %s after %s", a.code, a.body, time.Since(start))
		}
	})

	t.Run("a wait that times out", func(t *testing.T) {
		// An intake starting on a task queue no worker polls: the workflow
		// never closes.
		idle := newEnv(t, s, "nobody-polls-"+t.Name())
		start := time.Now()
		a := idle.post(t, "evt_h11", order("evt_h11", 9011, 100), "Prefer", "wait=1")
		took := time.Since(start)
		acc := a.accepted(t)
		if acc.Terminal == nil || *acc.Terminal || acc.Outcome != "" || took < time.Second || took > 5*time.Second {
			t.Fatalf("wait=1 on a stuck workflow: %s after %s", a.body, took)
		}
		g := idle.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h11", checkoutToken, nil, "Prefer", "wait=1")
		var v httpapi.View
		if err := json.Unmarshal(g.body, &v); err != nil || g.code != http.StatusOK || v.Terminal || v.Workflow == nil || v.Workflow.Status != "Running" {
			t.Fatalf("GET with wait=1: %d %s", g.code, g.body)
		}
	})

	t.Run("a token over its rate gets 429 with Retry-After", func(t *testing.T) {
		slow := newEnvRate(t, s, s.TaskQueue, 0.5) // bursts of 1
		first := slow.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h1", checkoutToken, nil)
		second := slow.do(t, http.MethodGet, "/v1/messages/order-placed/evt_h1", checkoutToken, nil)
		if first.code != http.StatusOK || second.code != http.StatusTooManyRequests || second.header.Get("Retry-After") == "" {
			t.Fatalf("rate 0.5/s: %d then %d (Retry-After %q)", first.code, second.code, second.header.Get("Retry-After"))
		}
		if p := second.problem(t); p.Type != "urn:effectively:problem:rate-limited" {
			t.Fatalf("problem %+v", p)
		}
		// Another token has its own budget.
		if a := slow.do(t, http.MethodGet, "/v1/messages/order-refund/evt_x", refundToken, nil); a.code == http.StatusTooManyRequests {
			t.Fatal("one token's rate limited another")
		}
	})

	t.Run("metrics per route and status", func(t *testing.T) {
		c := e.api.Metrics().Requests()
		if got := testCount(t, c, "POST /v1/messages", "202"); got == 0 {
			t.Fatal("no 202 counted for POST /v1/messages")
		}
		if got := testCount(t, c, "POST /v1/messages", "409"); got == 0 {
			t.Fatal("no 409 counted")
		}
		if got := testCount(t, c, "GET /v1/messages/{consumer}/{id}", "200"); got == 0 {
			t.Fatal("no 200 counted for GET")
		}
	})
}
