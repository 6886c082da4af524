package sendgridsim_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sendgrid/rest"
	"github.com/sendgrid/sendgrid-go"
	"github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simlimit"
)

const testKey = "SG.test-key.secret"

func newSim(t *testing.T, opts sendgridsim.Options) (*sendgridsim.Server, *httptest.Server) {
	t.Helper()
	sim := sendgridsim.New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv
}

// officialMail builds a mail with sendgrid-go's helpers, the way the worker
// does.
func officialMail(key, messageID, to string) *mail.SGMailV3 {
	m := mail.NewSingleEmail(mail.NewEmail("Receipts", "receipts@example.com"), "Your receipt",
		mail.NewEmail("", to), "Thanks!", "<p>Thanks!</p>")
	m.SetCustomArg("idempotency_key", key)
	m.SetCustomArg("message_id", messageID)
	return m
}

// sendOfficial sends m with sendgrid-go and rest, with a client timeout.
func sendOfficial(ctx context.Context, srv *httptest.Server, m *mail.SGMailV3) (*rest.Response, error) {
	req := sendgrid.GetRequest(testKey, sendgridsim.MailSendPath, srv.URL)
	req.Method = rest.Post
	req.Body = mail.GetRequestBody(m)
	c := rest.Client{HTTPClient: &http.Client{Timeout: 5 * time.Second, Transport: srv.Client().Transport}}
	return c.SendWithContext(ctx, req)
}

func mustSend(t *testing.T, srv *httptest.Server, m *mail.SGMailV3) *rest.Response {
	t.Helper()
	resp, err := sendOfficial(context.Background(), srv, m)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return resp
}

// post sends body to the simulator with raw HTTP and returns the status,
// headers and body.
func post(t *testing.T, srv *httptest.Server, path, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return do(t, srv, req)
}

func do(t *testing.T, srv *httptest.Server, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

type apiErrors struct {
	Errors []struct {
		Message string  `json:"message"`
		Field   *string `json:"field"`
		Help    *string `json:"help"`
	} `json:"errors"`
}

func decodeErrors(t *testing.T, body string) apiErrors {
	t.Helper()
	var e apiErrors
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q is not SendGrid's shape: %v", body, err)
	}
	if len(e.Errors) == 0 {
		t.Fatalf("error body %q has no errors", body)
	}
	return e
}

func TestSendAccepted(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})

	resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status = %d, body %q; want 202", resp.StatusCode, resp.Body)
	}
	if resp.Body != "" {
		t.Errorf("body = %q, want empty", resp.Body)
	}
	id := http.Header(resp.Headers).Get("X-Message-Id")
	if len(id) != 22 {
		t.Errorf("X-Message-Id = %q, want 22 characters", id)
	}

	st := sim.Stats()
	want := sendgridsim.Stats{Deliveries: 1, DeliveriesByKey: map[string]int{"email:evt_1": 1}, Requests: 1}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
	msgs := sim.Messages()
	if len(msgs) != 1 {
		t.Fatalf("Messages() has %d mails, want 1", len(msgs))
	}
	m := msgs[0]
	if m.XMessageID != id || !reflect.DeepEqual(m.To, []string{"ada@example.com"}) ||
		m.From != "receipts@example.com" || m.Subject != "Your receipt" ||
		!reflect.DeepEqual(m.CustomArgs, map[string]string{"idempotency_key": "email:evt_1", "message_id": "evt_1"}) ||
		time.Since(m.Time) > time.Minute {
		t.Errorf("Messages()[0] = %+v", m)
	}

	// SendGrid has no idempotency: the same mail again is delivered again,
	// under a new ID.
	resp2 := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if id2 := http.Header(resp2.Headers).Get("X-Message-Id"); id2 == "" || id2 == id {
		t.Errorf("second X-Message-Id = %q, first %q: want a new one", id2, id)
	}
	if got := sim.Stats().DeliveriesByKey["email:evt_1"]; got != 2 {
		t.Errorf("DeliveriesByKey[email:evt_1] = %d after two sends, want 2", got)
	}

	// Messages returns a copy.
	msgs[0].To[0] = "changed@example.com"
	if sim.Messages()[0].To[0] != "ada@example.com" {
		t.Error("Messages() shares memory with the simulator")
	}
}

func TestSendWithoutKeyCountsUnderEmptyKey(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	m := mail.NewSingleEmailPlainText(mail.NewEmail("", "a@example.com"), "s", mail.NewEmail("", "b@example.com"), "t")
	if resp := mustSend(t, srv, m); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status = %d, want 202", resp.StatusCode)
	}
	if got := sim.Stats().DeliveriesByKey; !reflect.DeepEqual(got, map[string]int{"": 1}) {
		t.Errorf("DeliveriesByKey = %v, want map[:1]", got)
	}
}

const validBody = `{"personalizations":[{"to":[{"email":"ada@example.com"}]}],
 "from":{"email":"receipts@example.com"},"subject":"hi",
 "content":[{"type":"text/plain","value":"hello"}],
 "custom_args":{"idempotency_key":"email:evt_1","message_id":"evt_1"}}`

func TestValidation(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantField string // "" for a null field
		wantMsg   string
	}{
		{"not json", `{"personalizations":`, "", "Bad Request"},
		{"wrong type", `{"personalizations":"ada@example.com"}`, "personalizations", "Expected: array, given: string"},
		{"no personalizations", `{"from":{"email":"a@example.com"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`,
			"personalizations", "personalizations field is required"},
		{"empty personalizations", `{"personalizations":[],"from":{"email":"a@example.com"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`,
			"personalizations", "personalizations field is required"},
		{"no to", `{"personalizations":[{}],"from":{"email":"a@example.com"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`,
			"personalizations.0.to", "to array is required"},
		{"bad to", strings.Replace(validBody, `"ada@example.com"`, `"ada"`, 1), "personalizations.0.to.0.email", "valid address"},
		{"display name to", strings.Replace(validBody, `"ada@example.com"`, `"Ada <ada@example.com>"`, 1), "personalizations.0.to.0.email", "valid address"},
		{"bad cc", strings.Replace(validBody, `}]}]`, `}],"cc":[{"email":"x@"}]}]`, 1), "personalizations.0.cc.0.email", "valid address"},
		{"duplicate", strings.Replace(validBody, `}]}]`, `}],"bcc":[{"email":"ADA@example.com"}]}]`, 1), "personalizations.0", "unique between to, cc, and bcc"},
		{"no from", strings.Replace(validBody, `"from":{"email":"receipts@example.com"},`, ``, 1), "from.email", "from object must be provided"},
		{"bad from", strings.Replace(validBody, `receipts@example.com`, `receipts@@example.com`, 1), "from.email", "from email does not contain a valid address"},
		{"no subject", strings.Replace(validBody, `"subject":"hi",`, ``, 1), "subject", "subject is required"},
		{"no content", strings.Replace(validBody, `"content":[{"type":"text/plain","value":"hello"}],`, ``, 1), "content", "content parameter is required"},
		{"empty value", strings.Replace(validBody, `"hello"`, `""`, 1), "content.0.value", "at least one character"},
		{"no type", strings.Replace(validBody, `"type":"text/plain",`, ``, 1), "content.0.type", "content type is required"},
		{"html first", strings.Replace(validBody, `{"type":"text/plain","value":"hello"}`, `{"type":"text/html","value":"<p>x</p>"},{"type":"text/plain","value":"x"}`, 1),
			"content.1.type", "text/plain must be first"},
		{"non-string custom arg", strings.Replace(validBody, `"message_id":"evt_1"`, `"message_id":1`, 1), "custom_args.message_id", "Expected: string, given: number"},
		{"custom args too large", strings.Replace(validBody, `"evt_1"}`, `"`+strings.Repeat("x", 10001)+`"}`, 1), "custom_args", "custom arguments must be at most 10000 bytes"},
	}
	sim, srv := newSim(t, sendgridsim.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := post(t, srv, sendgridsim.MailSendPath, tt.body, nil)
			if status != http.StatusBadRequest {
				t.Fatalf("status = %d, body %s; want 400", status, body)
			}
			e := decodeErrors(t, body).Errors[0]
			field := ""
			if e.Field != nil {
				field = *e.Field
			}
			if field != tt.wantField || !strings.Contains(e.Message, tt.wantMsg) {
				t.Errorf("first error = field %q, message %q; want field %q, message containing %q", field, e.Message, tt.wantField, tt.wantMsg)
			}
		})
	}
	if st := sim.Stats(); st.Deliveries != 0 || st.Rejected != len(tests) || st.Requests != len(tests) {
		t.Errorf("Stats() = %+v, want 0 deliveries and %d rejected requests", st, len(tests))
	}
}

func TestValidationReportsEveryError(t *testing.T) {
	_, srv := newSim(t, sendgridsim.Options{})
	status, _, body := post(t, srv, sendgridsim.MailSendPath, `{"personalizations":[{"to":[{"email":"bad"}]}],"from":{"email":"also-bad"}}`, nil)
	if status != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400", status)
	}
	var fields []string
	for _, e := range decodeErrors(t, body).Errors {
		if e.Field != nil {
			fields = append(fields, *e.Field)
		}
	}
	want := []string{"personalizations.0.to.0.email", "from.email", "subject", "content"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("error fields = %q, want %q", fields, want)
	}
}

func TestValidAlternatives(t *testing.T) {
	tests := map[string]string{
		"subject in every personalization": `{"personalizations":[{"to":[{"email":"a@example.com"}],"subject":"s"}],"from":{"email":"b@example.com"},"content":[{"type":"text/plain","value":"v"}]}`,
		"template instead of content":      `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"from":{"email":"b@example.com"},"template_id":"d-123"}`,
		"unknown fields":                   strings.Replace(validBody, `"subject"`, `"categories":["receipt"],"tracking_settings":{"click_tracking":{"enable":false}},"subject"`, 1),
		"charset parameter":                validBody,
	}
	_, srv := newSim(t, sendgridsim.Options{})
	for name, body := range tests {
		status, h, resp := post(t, srv, sendgridsim.MailSendPath, body, map[string]string{"Content-Type": "application/json; charset=utf-8"})
		if status != http.StatusAccepted || h.Get("X-Message-Id") == "" {
			t.Errorf("%s: status = %d, body %s; want 202 with X-Message-Id", name, status, resp)
		}
	}
}

func TestAuth(t *testing.T) {
	const invalidGrant = `{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked","field":null,"help":null}]}`
	tests := []struct {
		name      string
		opts      sendgridsim.Options
		auth      string
		want      int
		wantBody  string
		wantInMsg string
	}{
		{"missing", sendgridsim.Options{}, "", 401, "", "authorization required"},
		{"not SG", sendgridsim.Options{}, "Bearer abc", 401, invalidGrant, ""},
		{"bare SG.", sendgridsim.Options{}, "Bearer SG.", 401, invalidGrant, ""},
		{"basic", sendgridsim.Options{}, "Basic " + testKey, 401, invalidGrant, ""},
		{"any SG key", sendgridsim.Options{}, "Bearer SG.anything", 202, "", ""},
		{"wrong key", sendgridsim.Options{APIKey: testKey}, "Bearer SG.other", 401, invalidGrant, ""},
		{"right key", sendgridsim.Options{APIKey: testKey}, "Bearer " + testKey, 202, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, srv := newSim(t, tt.opts)
			status, _, body := post(t, srv, sendgridsim.MailSendPath, validBody, map[string]string{"Authorization": tt.auth})
			if status != tt.want {
				t.Fatalf("status = %d, body %s; want %d", status, body, tt.want)
			}
			if tt.wantBody != "" && body != tt.wantBody {
				t.Errorf("body = %s, want %s", body, tt.wantBody)
			}
			if tt.wantInMsg != "" && decodeErrors(t, body).Errors[0].Message != tt.wantInMsg {
				t.Errorf("body = %s, want message %q", body, tt.wantInMsg)
			}
			wantDeliveries := 0
			if tt.want == 202 {
				wantDeliveries = 1
			}
			if st := sim.Stats(); st.Deliveries != wantDeliveries || st.Rejected != 1-wantDeliveries {
				t.Errorf("Stats() = %+v, want %d deliveries", st, wantDeliveries)
			}
		})
	}
}

func TestContentTypeEncodingAndSize(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})

	if status, _, body := post(t, srv, sendgridsim.MailSendPath, validBody, map[string]string{"Content-Type": "text/plain"}); status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: status = %d, body %s; want 415", status, body)
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(validBody)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if status, h, body := post(t, srv, sendgridsim.MailSendPath, gz.String(), map[string]string{"Content-Encoding": "gzip"}); status != http.StatusAccepted || h.Get("X-Message-Id") == "" {
		t.Errorf("gzip body: status = %d, body %s; want 202", status, body)
	}

	huge := strings.Replace(validBody, `"hello"`, `"`+strings.Repeat("x", sendgridsim.MaxBodyBytes)+`"`, 1)
	if status, _, body := post(t, srv, sendgridsim.MailSendPath, huge, nil); status != http.StatusRequestEntityTooLarge {
		t.Errorf("31 MB body: status = %d, body %.200s; want 413", status, body)
	}
	if st := sim.Stats(); st.Deliveries != 1 || st.Rejected != 2 {
		t.Errorf("Stats() = %+v, want 1 delivery, 2 rejected", st)
	}
}

func TestSandbox(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	m := officialMail("email:evt_1", "evt_1", "ada@example.com")
	m.SetMailSettings(mail.NewMailSettings().SetSandboxMode(mail.NewSetting(true)))
	resp := mustSend(t, srv, m)
	if resp.StatusCode != http.StatusOK || resp.Body != "" || http.Header(resp.Headers).Get("X-Message-Id") != "" {
		t.Errorf("sandbox: status %d, body %q, headers %v; want 200, empty, no X-Message-Id", resp.StatusCode, resp.Body, resp.Headers)
	}
	if st := sim.Stats(); st.Deliveries != 0 || st.Sandbox != 1 || len(st.DeliveriesByKey) != 0 || len(sim.Messages()) != 0 {
		t.Errorf("Stats() = %+v, Messages() = %v; want a sandbox mail and no delivery", st, sim.Messages())
	}

	// Sandbox mode still validates.
	bad := mail.NewSingleEmailPlainText(mail.NewEmail("", "a@example.com"), "", mail.NewEmail("", "b@example.com"), "t")
	bad.SetMailSettings(mail.NewMailSettings().SetSandboxMode(mail.NewSetting(true)))
	if resp := mustSend(t, srv, bad); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid sandbox mail: status %d, want 400", resp.StatusCode)
	}
}

func TestFaultErrorBefore(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Times: 1})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 503, Times: 1})

	for _, want := range []int{500, 503, 202} {
		resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
		if resp.StatusCode != want {
			t.Fatalf("status = %d, want %d", resp.StatusCode, want)
		}
		if want != 202 {
			decodeErrors(t, resp.Body)
			if http.Header(resp.Headers).Get("X-Message-Id") != "" {
				t.Error("error answer has an X-Message-Id")
			}
		}
	}
	if st := sim.Stats(); st.Deliveries != 1 || st.Rejected != 2 || st.FaultsFired != 2 || len(sim.Faults()) != 0 {
		t.Errorf("Stats() = %+v, faults left %v; want 1 delivery, 2 rejected, 2 fired, none left", st, sim.Faults())
	}
}

func TestFaultErrorAfter(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorAfter})
	resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status = %d, want 500", resp.StatusCode)
	}
	decodeErrors(t, resp.Body)
	if st := sim.Stats(); st.Deliveries != 1 || st.DeliveriesByKey["email:evt_1"] != 1 || st.Rejected != 0 {
		t.Errorf("Stats() = %+v, want the mail delivered despite the 500", st)
	}
}

func TestFaultLostAfter(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	// A first send puts a connection in the pool, so the lost one runs on a
	// reused connection: net/http must not replay the POST on it.
	mustSend(t, srv, officialMail("email:evt_0", "evt_0", "ada@example.com"))
	sim.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: "evt_1"}, Kind: sendgridsim.FaultLostAfter, Times: 1})

	resp, err := sendOfficial(context.Background(), srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if err == nil {
		t.Fatalf("lost_after: got status %d, want a transport error", resp.StatusCode)
	}
	if st := sim.Stats(); st.DeliveriesByKey["email:evt_1"] != 1 {
		t.Errorf("DeliveriesByKey = %v, want email:evt_1 delivered once although its answer was lost", st.DeliveriesByKey)
	}
	// The fault was used up: the retry goes through, and is a second delivery.
	if resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("retry status = %d, want 202", resp.StatusCode)
	}
	if got := sim.Stats().DeliveriesByKey["email:evt_1"]; got != 2 {
		t.Errorf("DeliveriesByKey[email:evt_1] = %d, want 2", got)
	}
}

func TestFaultLostAfterWithoutHijacker(t *testing.T) {
	sim := sendgridsim.New(sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultLostAfter})
	req := httptest.NewRequest(http.MethodPost, sendgridsim.MailSendPath, strings.NewReader(validBody))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, http.ErrAbortHandler) {
			t.Errorf("recovered %v, want http.ErrAbortHandler", err)
		}
		if d := sim.Stats().Deliveries; d != 1 {
			t.Errorf("Deliveries = %d, want 1", d)
		}
	}()
	sim.ServeHTTP(httptest.NewRecorder(), req)
}

func TestFaultRateLimit(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultRateLimit, Times: 1})
	resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429", resp.StatusCode)
	}
	h := http.Header(resp.Headers)
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if h.Get("X-RateLimit-Limit") == "" || h.Get("X-RateLimit-Remaining") != "0" || err != nil || reset < time.Now().Unix() {
		t.Errorf("rate limit headers = %v", h)
	}
	if msg := decodeErrors(t, resp.Body).Errors[0].Message; msg != "too many requests" {
		t.Errorf("message = %q", msg)
	}
	if st := sim.Stats(); st.Deliveries != 0 || st.Rejected != 1 {
		t.Errorf("Stats() = %+v, want nothing delivered", st)
	}
}

func TestFaultDelay(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	const delay = 150 * time.Millisecond
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 502, Times: 1})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: delay, Times: 1})

	// Delay and error combine, whatever their order.
	start := time.Now()
	resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if elapsed := time.Since(start); resp.StatusCode != 502 || elapsed < delay {
		t.Errorf("status %d after %v, want 502 after at least %v", resp.StatusCode, elapsed, delay)
	}

	// A client that gives up does not stop the mail: it is delivered at the
	// delay's end, as SendGrid sends a mail it received.
	const held = 500 * time.Millisecond
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: held})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err := sendOfficial(ctx, srv, officialMail("email:evt_2", "evt_2", "ada@example.com"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want a deadline exceeded", err)
	}
	srv.Close() // waits for the handler to return
	if elapsed := time.Since(start); elapsed < held {
		t.Errorf("handler returned after %v, before the delay's end", elapsed)
	}
	if st := sim.Stats(); st.Deliveries != 1 {
		t.Errorf("Deliveries = %d, want 1: the mail goes out though its client left", st.Deliveries)
	}
}

func TestLatency(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{Latency: 100 * time.Millisecond})
	start := time.Now()
	mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond {
		t.Errorf("answered after %v, want at least the 100ms latency", elapsed)
	}
	sim.SetLatency(0)
	start = time.Now()
	mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if elapsed := time.Since(start); elapsed > 90*time.Millisecond {
		t.Errorf("answered after %v with no latency", elapsed)
	}
	sim.Reset() // restores Options.Latency
	start = time.Now()
	mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond {
		t.Errorf("answered after %v after Reset, want the Options latency", elapsed)
	}
}

func TestFaultMatching(t *testing.T) {
	tests := []struct {
		name  string
		match sendgridsim.Match
		hit   []bool // for evt_1 to ada, evt_2 to bob, evt_1 to ADA
	}{
		{"any", sendgridsim.Match{}, []bool{true, true, true}},
		{"message id", sendgridsim.Match{MessageID: "evt_1"}, []bool{true, false, true}},
		{"key", sendgridsim.Match{IdempotencyKey: "email:evt_2"}, []bool{false, true, false}},
		{"to ignores case", sendgridsim.Match{To: "Ada@Example.com"}, []bool{true, false, true}},
		{"every field", sendgridsim.Match{MessageID: "evt_1", To: "bob@example.com"}, []bool{false, false, false}},
	}
	mails := []*mail.SGMailV3{
		officialMail("email:evt_1", "evt_1", "ada@example.com"),
		officialMail("email:evt_2", "evt_2", "bob@example.com"),
		officialMail("email:evt_1", "evt_1", "ADA@example.com"),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, srv := newSim(t, sendgridsim.Options{})
			sim.AddFault(sendgridsim.Fault{Match: tt.match, Kind: sendgridsim.FaultErrorBefore})
			for i, m := range mails {
				resp := mustSend(t, srv, m)
				if got := resp.StatusCode == 500; got != tt.hit[i] {
					t.Errorf("mail %d: status %d, want fault %v", i, resp.StatusCode, tt.hit[i])
				}
			}
			if len(sim.Faults()) != 1 {
				t.Error("an unlimited fault was removed")
			}
		})
	}
}

func TestFaultTimes(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Times: 2})
	var got []int
	for range 3 {
		got = append(got, mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com")).StatusCode)
	}
	if !reflect.DeepEqual(got, []int{500, 500, 202}) {
		t.Errorf("statuses = %v, want [500 500 202]", got)
	}
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore})
	sim.ClearFaults()
	if s := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com")).StatusCode; s != 202 {
		t.Errorf("after ClearFaults: status %d, want 202", s)
	}
}

func TestFaultsAreNotAppliedToInvalidMail(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Times: 1})
	if status, _, _ := post(t, srv, sendgridsim.MailSendPath, `{}`, nil); status != 400 {
		t.Errorf("invalid mail: status %d, want 400", status)
	}
	if len(sim.Faults()) != 1 {
		t.Error("an invalid mail used up the fault")
	}
}

func TestAddFaultPanicsOnInvalidFault(t *testing.T) {
	for _, f := range []sendgridsim.Fault{
		{Kind: "explode"},
		{Kind: sendgridsim.FaultDelay},
		{Kind: sendgridsim.FaultErrorBefore, Status: 200},
		{Kind: sendgridsim.FaultRateLimit, Times: -1},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AddFault(%+v) did not panic", f)
				}
			}()
			sendgridsim.New(sendgridsim.Options{}).AddFault(f)
		}()
	}
}

func TestFaultJSON(t *testing.T) {
	f := sendgridsim.Fault{Match: sendgridsim.Match{MessageID: "evt_1"}, Kind: sendgridsim.FaultDelay, Delay: 250 * time.Millisecond, Times: 1}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"match":{"message_id":"evt_1"},"kind":"delay","delay_ms":250,"times":1}`
	if string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back sendgridsim.Fault
	if err := json.Unmarshal(b, &back); err != nil || back != f {
		t.Errorf("Unmarshal = %+v, %v; want %+v", back, err, f)
	}
}

func TestControlAPI(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	control := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		status, _, resp := do(t, srv, req)
		return status, resp
	}

	if status, body := control("POST", "/_sim/faults", `{"match":{"message_id":"evt_1"},"kind":"lost_after","times":1}`); status != http.StatusCreated {
		t.Fatalf("POST /_sim/faults: %d %s", status, body)
	}
	if status, body := control("POST", "/_sim/faults", `{"kind":"error_before","status":503,"times":1}`); status != http.StatusCreated {
		t.Fatalf("POST /_sim/faults: %d %s", status, body)
	}
	if status, body := control("POST", "/_sim/faults", `{"match":{"to":"nobody@example.com"},"kind":"delay","delay":"1.5s"}`); status != http.StatusCreated ||
		body != `{"match":{"to":"nobody@example.com"},"kind":"delay","delay_ms":1500}`+"\n" {
		t.Fatalf("POST /_sim/faults with a duration string: %d %s", status, body)
	}
	status, body := control("GET", "/_sim/faults", "")
	const wantFaults = `{"faults":[` +
		`{"match":{"message_id":"evt_1"},"kind":"lost_after","times":1,"remaining":1},` +
		`{"match":{},"kind":"error_before","status":503,"times":1,"remaining":1},` +
		`{"match":{"to":"nobody@example.com"},"kind":"delay","delay_ms":1500}]}` + "\n"
	if status != 200 || body != wantFaults {
		t.Errorf("GET /_sim/faults: %d %s, want %s", status, body, wantFaults)
	}
	for _, bad := range []string{
		`{"kind":"lost_after","tiems":1}`, // misspelled member
		`{"kind":"explode"}`,
		`{"kind":"delay"}`,
		`{"kind":"delay","delay":"soon"}`,
		`{"kind":"delay","delay":"1s","delay_ms":5}`,
		`not json`,
	} {
		status, body := control("POST", "/_sim/faults", bad)
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); status != http.StatusBadRequest || err != nil || e.Error == "" {
			t.Errorf("POST /_sim/faults %s: %d %s, want 400 with an error", bad, status, body)
		}
	}
	sim.ClearFaults()
	control("POST", "/_sim/faults", `{"match":{"message_id":"evt_1"},"kind":"lost_after","times":1}`)
	control("POST", "/_sim/faults", `{"kind":"error_before","status":503,"times":1}`)

	if _, err := sendOfficial(context.Background(), srv, officialMail("email:evt_1", "evt_1", "ada@example.com")); err == nil {
		t.Error("lost_after fault added over HTTP did not fire")
	}
	if resp := mustSend(t, srv, officialMail("email:evt_2", "evt_2", "bob@example.com")); resp.StatusCode != 503 {
		t.Errorf("error_before fault added over HTTP: status %d, want 503", resp.StatusCode)
	}

	status, body = control("GET", "/_sim/stats", "")
	var stats map[string]any
	if err := json.Unmarshal([]byte(body), &stats); status != 200 || err != nil {
		t.Fatalf("GET /_sim/stats: %d %s", status, body)
	}
	wantStats := map[string]any{
		"deliveries": 1.0, "deliveries_by_key": map[string]any{"email:evt_1": 1.0},
		"requests": 2.0, "rejected": 1.0, "sandbox": 0.0, "faults_fired": 2.0,
		"rate_limited": 0.0,
	}
	if !reflect.DeepEqual(stats, wantStats) {
		t.Errorf("GET /_sim/stats = %s, want %v", body, wantStats)
	}

	status, body = control("GET", "/_sim/messages", "")
	var msgs []map[string]any
	if err := json.Unmarshal([]byte(body), &msgs); status != 200 || err != nil || len(msgs) != 1 {
		t.Fatalf("GET /_sim/messages: %d %s", status, body)
	}
	if args, ok := msgs[0]["custom_args"].(map[string]any); !ok || args["idempotency_key"] != "email:evt_1" || msgs[0]["x_message_id"] == "" {
		t.Errorf("GET /_sim/messages: %d %s", status, body)
	}

	if status, body := control("POST", "/_sim/latency", `{"latency_ms":120}`); status != http.StatusOK || body != `{"latency_ms":120}`+"\n" {
		t.Errorf("POST /_sim/latency: %d %s", status, body)
	}
	if status, body := control("GET", "/_sim/latency", ""); status != http.StatusOK || body != `{"latency_ms":120}`+"\n" {
		t.Errorf("GET /_sim/latency: %d %s", status, body)
	}
	start := time.Now()
	mustSend(t, srv, officialMail("email:evt_3", "evt_3", "ada@example.com"))
	if elapsed := time.Since(start); elapsed < 120*time.Millisecond {
		t.Errorf("latency set over HTTP not applied: answered after %v", elapsed)
	}
	for _, bad := range []string{`{}`, `{"latency_ms":-1}`, `{"latency":5}`} {
		if status, _ := control("POST", "/_sim/latency", bad); status != http.StatusBadRequest {
			t.Errorf("POST /_sim/latency %s: %d, want 400", bad, status)
		}
	}

	control("POST", "/_sim/faults", `{"kind":"error_before"}`)
	if status, body := control("DELETE", "/_sim/faults", ""); status != http.StatusOK || body != `{"ok":true}`+"\n" || len(sim.Faults()) != 0 {
		t.Errorf("DELETE /_sim/faults: %d %s, faults left %v", status, body, sim.Faults())
	}
	if status, body := control("POST", "/_sim/reset", ""); status != http.StatusOK || body != `{"ok":true}`+"\n" {
		t.Errorf("POST /_sim/reset: %d %s", status, body)
	}
	_, body = control("GET", "/_sim/stats", "")
	if want := `{"deliveries":0,"deliveries_by_key":{},"requests":0,"rejected":0,"sandbox":0,"faults_fired":0,"rate_limited":0}` + "\n"; body != want {
		t.Errorf("stats after reset = %s, want %s", body, want)
	}
	if _, body := control("GET", "/_sim/messages", ""); body != "[]\n" {
		t.Errorf("messages after reset = %q, want []", body)
	}
	if status, _ := control("GET", sendgridsim.MailSendPath, ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d, want 405", sendgridsim.MailSendPath, status)
	}
}

func TestConcurrentSends(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	sim.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{IdempotencyKey: "email:evt_0"}, Kind: sendgridsim.FaultErrorBefore, Times: 5})
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				key := fmt.Sprintf("email:evt_%d", i%5)
				if _, err := sendOfficial(context.Background(), srv, officialMail(key, "evt", "ada@example.com")); err != nil {
					t.Errorf("worker %d: %v", w, err)
				}
				_ = sim.Stats()
				_ = sim.Messages()
			}
		})
	}
	wg.Wait()
	st := sim.Stats()
	total := workers * perWorker
	if st.Requests != total || st.Rejected != 5 || st.Deliveries != total-5 || st.FaultsFired != 5 ||
		st.DeliveriesByKey["email:evt_0"] != total/5-5 || st.DeliveriesByKey["email:evt_1"] != total/5 {
		t.Errorf("Stats() = %+v", st)
	}
	if n := len(sim.Messages()); n != st.Deliveries {
		t.Errorf("%d messages for %d deliveries", n, st.Deliveries)
	}
}

// TestRateLimitPerKey: past a key's limit Mail Send answers 429 with
// X-RateLimit-* and, as SendGrid, no Retry-After, delivers nothing, and
// another key still sends.
func TestRateLimitPerKey(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{RateLimit: simlimit.Rate{PerSecond: 0.001, Burst: 1}})
	if resp := mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com")); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first mail: %d", resp.StatusCode)
	}
	resp := mustSend(t, srv, officialMail("email:evt_2", "evt_2", "ada@example.com"))
	h := http.Header(resp.Headers)
	if resp.StatusCode != http.StatusTooManyRequests || h.Get("Retry-After") != "" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("second mail: %d %v, want 429 with X-RateLimit-Reset and no Retry-After", resp.StatusCode, h)
	}
	body := `{"personalizations":[{"to":[{"email":"bob@example.com"}]}],"from":{"email":"r@example.com"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`
	if status, _, b := post(t, srv, sendgridsim.MailSendPath, body, map[string]string{"Authorization": "Bearer SG.other", "Content-Type": "application/json"}); status != http.StatusAccepted {
		t.Fatalf("another key: %d %s", status, b)
	}
	if st := sim.Stats(); st.Deliveries != 2 || st.RateLimited != 1 {
		t.Errorf("Deliveries = %d, RateLimited = %d; want 2 and 1", st.Deliveries, st.RateLimited)
	}
}
