package email_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/sim/sendgridsim"
)

const testKey = "SG.k3y-that-must-never-leak.Zx9"

func newSim(t *testing.T) (*sendgridsim.Server, *httptest.Server) {
	t.Helper()
	sim := sendgridsim.New(sendgridsim.Options{APIKey: testKey})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv
}

func newClient(t *testing.T, baseURL string, mod ...func(*email.Config)) *email.Client {
	t.Helper()
	cfg := email.Config{APIKey: testKey, BaseURL: baseURL, From: "receipts@example.com", FromName: "Effectively Receipts", Timeout: 5 * time.Second}
	for _, f := range mod {
		f(&cfg)
	}
	c, err := email.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func receipt(id string) email.Mail {
	return email.Mail{
		IdempotencyKey: "email:" + id,
		MessageID:      id,
		To:             "ada@example.com",
		Subject:        "Your receipt",
		Text:           "Thanks for your order.",
		HTML:           "<p>Thanks for your order.</p>",
	}
}

// assertNoKey fails if the API key shows in err in any format.
func assertNoKey(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%q", err)} {
		if strings.Contains(s, testKey) || strings.Contains(s, strings.TrimPrefix(testKey, "SG.")) {
			t.Errorf("error leaks the API key: %s", s)
		}
	}
}

func TestSendDelivers(t *testing.T) {
	sim, srv := newSim(t)
	c := newClient(t, srv.URL)

	id, err := c.Send(context.Background(), receipt("evt_1"))
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	st := sim.Stats()
	if st.Deliveries != 1 || !reflect.DeepEqual(st.DeliveriesByKey, map[string]int{"email:evt_1": 1}) {
		t.Errorf("Stats() = %+v, want one delivery for email:evt_1", st)
	}
	msgs := sim.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if id == "" || id != m.XMessageID {
		t.Errorf("Send returned %q, the simulator answered X-Message-Id %q", id, m.XMessageID)
	}
	wantArgs := map[string]string{"idempotency_key": "email:evt_1", "message_id": "evt_1"}
	if !reflect.DeepEqual(m.CustomArgs, wantArgs) {
		t.Errorf("custom_args = %v, want %v", m.CustomArgs, wantArgs)
	}
	if !reflect.DeepEqual(m.To, []string{"ada@example.com"}) || m.From != "receipts@example.com" || m.Subject != "Your receipt" {
		t.Errorf("delivered %+v", m)
	}

	// No idempotency at SendGrid: sending again delivers again.
	id2, err := c.Send(context.Background(), receipt("evt_1"))
	if err != nil || id2 == id {
		t.Errorf("second Send = %q, %v; want a new ID", id2, err)
	}
	if got := sim.Stats().DeliveriesByKey["email:evt_1"]; got != 2 {
		t.Errorf("DeliveriesByKey[email:evt_1] = %d, want 2", got)
	}
}

func TestSendDefaultFromAndNoMessageID(t *testing.T) {
	sim, srv := newSim(t)
	c, err := email.New(email.Config{APIKey: testKey, BaseURL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	m := receipt("evt_1")
	m.MessageID, m.HTML = "", ""
	if _, err := c.Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := sim.Messages()[0]
	if got.From != email.DefaultFrom || !reflect.DeepEqual(got.CustomArgs, map[string]string{"idempotency_key": "email:evt_1"}) {
		t.Errorf("delivered from %q with custom_args %v", got.From, got.CustomArgs)
	}
}

// TestRequest checks the request itself, as SendGrid would see it.
func TestRequest(t *testing.T) {
	var (
		mu  sync.Mutex
		got *http.Request
		raw []byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, raw = r, b
		mu.Unlock()
		w.Header().Set("X-Message-Id", "abc")
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	c := newClient(t, srv.URL)
	if id, err := c.Send(context.Background(), receipt("evt_1")); err != nil || id != "abc" {
		t.Fatalf("Send = %q, %v", id, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Method != http.MethodPost || got.URL.Path != "/v3/mail/send" ||
		got.Header.Get("Authorization") != "Bearer "+testKey || got.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s %s, headers %v", got.Method, got.URL.Path, got.Header)
	}
	if got.Header.Get("Idempotency-Key") != "" || got.Header.Get("X-Idempotency-Key") != "" {
		t.Error("request carries an idempotency header, which makes net/http replay it")
	}
	var body struct {
		Personalizations []struct {
			To []struct{ Email string } `json:"to"`
		} `json:"personalizations"`
		From       struct{ Email, Name string }   `json:"from"`
		Subject    string                         `json:"subject"`
		Content    []struct{ Type, Value string } `json:"content"`
		CustomArgs map[string]string              `json:"custom_args"`
		Mail       map[string]any                 `json:"mail_settings"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("body %s: %v", raw, err)
	}
	if len(body.Personalizations) != 1 || len(body.Personalizations[0].To) != 1 || body.Personalizations[0].To[0].Email != "ada@example.com" ||
		body.From.Email != "receipts@example.com" || body.From.Name != "Effectively Receipts" || body.Subject != "Your receipt" ||
		len(body.Content) != 2 || body.Content[0].Type != "text/plain" || body.Content[1].Type != "text/html" ||
		body.CustomArgs["idempotency_key"] != "email:evt_1" || body.CustomArgs["message_id"] != "evt_1" || body.Mail != nil {
		t.Errorf("body = %s", raw)
	}
}

func TestSandboxMode(t *testing.T) {
	sim, srv := newSim(t)
	c := newClient(t, srv.URL, func(c *email.Config) { c.SandboxMode = true })
	id, err := c.Send(context.Background(), receipt("evt_1"))
	if err != nil || id != "" {
		t.Errorf("Send = %q, %v; want \"\", nil", id, err)
	}
	if st := sim.Stats(); st.Sandbox != 1 || st.Deliveries != 0 {
		t.Errorf("Stats() = %+v, want one sandbox mail and no delivery", st)
	}
}

func TestProviderStatuses(t *testing.T) {
	tests := []struct {
		fault     sendgridsim.Fault
		status    int
		permanent bool
		config    bool
	}{
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 400}, 400, true, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 401}, 401, false, true},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 403}, 403, false, true},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 404}, 404, false, true},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 413}, 413, true, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 422}, 422, true, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 408}, 408, false, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultRateLimit}, 429, false, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore}, 500, false, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 502}, 502, false, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorBefore, Status: 503}, 503, false, false},
		{sendgridsim.Fault{Kind: sendgridsim.FaultErrorAfter}, 500, false, false},
	}
	sim, srv := newSim(t)
	c := newClient(t, srv.URL)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s_%d", tt.fault.Kind, tt.status), func(t *testing.T) {
			sim.Reset()
			tt.fault.Times = 1
			sim.AddFault(tt.fault)
			id, err := c.Send(context.Background(), receipt("evt_1"))
			var e *email.Error
			if !errors.As(err, &e) {
				t.Fatalf("Send = %q, %v; want an *Error", id, err)
			}
			if e.StatusCode != tt.status || e.Permanent != tt.permanent || email.IsPermanent(err) != tt.permanent || email.IsConfiguration(err) != tt.config {
				t.Errorf("error %+v, IsPermanent %v, IsConfiguration %v; want status %d, permanent %v, configuration %v",
					e, email.IsPermanent(err), email.IsConfiguration(err), tt.status, tt.permanent, tt.config)
			}
			if e.Message == "" || !strings.Contains(err.Error(), fmt.Sprint(tt.status)) || !strings.Contains(err.Error(), "email:evt_1") {
				t.Errorf("error %q does not say what happened", err)
			}
			assertNoKey(t, err)
			wantDeliveries := 0
			if tt.fault.Kind == sendgridsim.FaultErrorAfter {
				wantDeliveries = 1 // the 500 came after delivery
			}
			if d := sim.Stats().Deliveries; d != wantDeliveries {
				t.Errorf("Deliveries = %d, want %d", d, wantDeliveries)
			}
		})
	}
}

func TestUnauthorized(t *testing.T) {
	_, srv := newSim(t)
	c := newClient(t, srv.URL, func(c *email.Config) { c.APIKey = "SG.wrong" })
	_, err := c.Send(context.Background(), receipt("evt_1"))
	var e *email.Error
	if !errors.As(err, &e) || e.StatusCode != 401 || e.Permanent || !email.IsConfiguration(err) ||
		e.Message != "The provided authorization grant is invalid, expired, or revoked" || e.Field != "" {
		t.Errorf("Send error = %#v", err)
	}
	if strings.Contains(err.Error(), "SG.wrong") {
		t.Errorf("error leaks the API key: %v", err)
	}
}

// sendGridAnswer serves a fixed answer, counting the requests.
func sendGridAnswer(t *testing.T, status int, body string, header map[string]string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestBadRequestNamesField(t *testing.T) {
	long := strings.Repeat("é", 400)
	srv, _ := sendGridAnswer(t, 400, `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email","help":"http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message.personalizations"},{"message":"second","field":"from.email","help":null}]}`, nil)
	_, err := newClient(t, srv.URL).Send(context.Background(), receipt("evt_1"))
	var e *email.Error
	if !errors.As(err, &e) || !email.IsPermanent(err) || e.StatusCode != 400 ||
		e.Field != "personalizations.0.to.0.email" || e.Message != "Does not contain a valid address." {
		t.Fatalf("Send error = %#v", err)
	}
	if want := `email: send "email:evt_1": sendgrid answered 400 Bad Request: Does not contain a valid address. (field personalizations.0.to.0.email)`; err.Error() != want {
		t.Errorf("Error() = %q\nwant       %q", err, want)
	}

	srv, _ = sendGridAnswer(t, 400, `{"errors":[{"message":"`+long+`\nforged log line","field":null,"help":null}]}`, nil)
	_, err = newClient(t, srv.URL).Send(context.Background(), receipt("evt_1"))
	if !errors.As(err, &e) || e.Field != "" || len([]rune(e.Message)) != 300 || !strings.HasSuffix(e.Message, "…") {
		t.Errorf("long message: %d runes, field %q, error %v", len([]rune(e.Message)), e.Field, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q contains a newline from the answer", err)
	}
}

func TestNonJSONAnswer(t *testing.T) {
	srv, _ := sendGridAnswer(t, 502, "<html>Bad Gateway</html>", nil)
	_, err := newClient(t, srv.URL).Send(context.Background(), receipt("evt_1"))
	var e *email.Error
	if !errors.As(err, &e) || e.StatusCode != 502 || e.Permanent || e.Message != "<html>Bad Gateway</html>" {
		t.Errorf("Send error = %#v", err)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	srv, n := sendGridAnswer(t, http.StatusTemporaryRedirect, "", map[string]string{"Location": "/elsewhere"})
	_, err := newClient(t, srv.URL).Send(context.Background(), receipt("evt_1"))
	var e *email.Error
	if !errors.As(err, &e) || e.StatusCode != 307 || e.Permanent || !email.IsConfiguration(err) {
		t.Errorf("Send error = %#v, want a 307 about the configuration, not permanent", err)
	}
	if n.Load() != 1 {
		t.Errorf("%d requests, want 1: the redirect was followed", n.Load())
	}
}

func TestAcceptedWithoutMessageID(t *testing.T) {
	srv, _ := sendGridAnswer(t, http.StatusAccepted, "", nil)
	if id, err := newClient(t, srv.URL).Send(context.Background(), receipt("evt_1")); id != "" || err != nil {
		t.Errorf("Send = %q, %v; want \"\", nil", id, err)
	}
}

func TestLostAnswer(t *testing.T) {
	sim, srv := newSim(t)
	c := newClient(t, srv.URL)
	// A first send leaves a kept-alive connection, so the lost answer happens
	// on a reused connection, where net/http could replay a request it
	// considers idempotent.
	if _, err := c.Send(context.Background(), receipt("evt_0")); err != nil {
		t.Fatal(err)
	}
	sim.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: "evt_1"}, Kind: sendgridsim.FaultLostAfter, Times: 1})

	id, err := c.Send(context.Background(), receipt("evt_1"))
	if err == nil {
		t.Fatalf("Send = %q, nil; want an error", id)
	}
	if email.IsPermanent(err) {
		t.Errorf("lost answer is permanent: %v", err)
	}
	if _, ok := errors.AsType[*email.Error](err); ok {
		t.Errorf("lost answer is an *Error: %v", err)
	}
	if !strings.Contains(err.Error(), "may have been delivered") {
		t.Errorf("error %q does not warn that the mail may have been delivered", err)
	}
	assertNoKey(t, err)
	if got := sim.Stats().DeliveriesByKey["email:evt_1"]; got != 1 {
		t.Errorf("DeliveriesByKey[email:evt_1] = %d, want 1 (delivered, answer lost, no hidden retry)", got)
	}
}

// TestTooNearTheDeadlineSendsNothing: a mail whose context has less time
// left than the send margin is refused before SendGrid sees it, as a
// transient *deadline.TooLateError; with no margin it is sent.
func TestTooNearTheDeadlineSendsNothing(t *testing.T) {
	sim, srv := newSim(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the default margin is 2s
	defer cancel()
	_, err := newClient(t, srv.URL).Send(ctx, receipt("evt_1"))
	if !deadline.TooLate(err) || email.IsPermanent(err) {
		t.Fatalf("err = %v, want a transient TooLateError", err)
	}
	if d := sim.Stats().Deliveries; d != 0 {
		t.Fatalf("%d mails delivered too near their deadline", d)
	}
	c := newClient(t, srv.URL, func(c *email.Config) { c.SendMargin = -1 })
	if _, err := c.Send(ctx, receipt("evt_1")); err != nil || sim.Stats().Deliveries != 1 {
		t.Fatalf("with no margin: err = %v, deliveries %d", err, sim.Stats().Deliveries)
	}
}

func TestTimeout(t *testing.T) {
	t.Run("own client", func(t *testing.T) { testTimeout(t, nil) })
	// A caller's client without a timeout of its own is still bounded.
	t.Run("custom client", func(t *testing.T) { testTimeout(t, &http.Client{}) })
}

func testTimeout(t *testing.T, hc *http.Client) {
	sim, srv := newSim(t)
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: time.Second})
	c := newClient(t, srv.URL, func(c *email.Config) { c.Timeout = 200 * time.Millisecond; c.HTTPClient = hc })

	start := time.Now()
	_, err := c.Send(context.Background(), receipt("evt_1"))
	elapsed := time.Since(start)
	if err == nil || elapsed > 3*time.Second {
		t.Fatalf("Send returned %v after %v, want an error after about 200ms", err, elapsed)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Errorf("error %v is not a timeout", err)
	}
	if email.IsPermanent(err) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error %q: want a transient timeout", err)
	}
	assertNoKey(t, err)
	srv.Close() // waits for the simulator's handler
	// SendGrid sends a mail it received though its client timed out: why a
	// receipt whose send timed out waits for SendGrid's events before a
	// resend.
	if d := sim.Stats().Deliveries; d != 1 {
		t.Errorf("Deliveries = %d, want 1", d)
	}
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

func TestContextCancellation(t *testing.T) {
	sim, srv := newSim(t)
	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: time.Second})
	c := newClient(t, srv.URL)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Send(ctx, receipt("evt_1"))
	if !errors.Is(err, context.Canceled) || email.IsPermanent(err) || time.Since(start) > 3*time.Second {
		t.Errorf("Send = %v after %v; want a transient cancellation", err, time.Since(start))
	}

	// Already canceled: nothing is sent.
	before := sim.Stats().Requests
	if _, err := c.Send(ctx, receipt("evt_2")); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not sent") {
		t.Errorf("Send with a canceled context = %v", err)
	}
	if after := sim.Stats().Requests; after != before {
		t.Errorf("a canceled Send made a request")
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = newClient(t, "http://"+addr).Send(context.Background(), receipt("evt_1"))
	if err == nil || email.IsPermanent(err) || !strings.Contains(err.Error(), "not sent") {
		t.Errorf("Send to a closed port = %v, want a transient error saying the mail was not sent", err)
	}
	assertNoKey(t, err)
}

func TestInvalidMail(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*email.Mail)
		want   string
	}{
		{"empty key", func(m *email.Mail) { m.IdempotencyKey = "" }, "IdempotencyKey: is required"},
		{"long key", func(m *email.Mail) { m.IdempotencyKey = strings.Repeat("k", 256) }, "IdempotencyKey: is 256 bytes"},
		{"control in key", func(m *email.Mail) { m.IdempotencyKey = "email:\nevt" }, "IdempotencyKey: must be printable"},
		{"long message id", func(m *email.Mail) { m.MessageID = strings.Repeat("m", 256) }, "MessageID: is 256 bytes"},
		{"no to", func(m *email.Mail) { m.To = "" }, "To: address is empty"},
		{"display name to", func(m *email.Mail) { m.To = "Ada <ada@example.com>" }, "To: address \"Ada <ada@example.com>\" is not a bare address"},
		{"no subject", func(m *email.Mail) { m.Subject = " " }, "Subject: is required"},
		{"crlf subject", func(m *email.Mail) { m.Subject = "hi\r\nBcc: x@example.com" }, "Subject: must be printable"},
		{"no body", func(m *email.Mail) { m.Text, m.HTML = "", "" }, "Text: Text or HTML is required"},
		{"bad utf-8", func(m *email.Mail) { m.HTML = "\xff" }, "HTML: is not valid UTF-8"},
	}
	sim, srv := newSim(t)
	c := newClient(t, srv.URL)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := receipt("evt_1")
			tt.modify(&m)
			_, err := c.Send(context.Background(), m)
			if !errors.Is(err, email.ErrInvalidMail) || !email.IsPermanent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Send error = %v, want a permanent invalid mail error containing %q", err, tt.want)
			}
		})
	}
	if n := sim.Stats().Requests; n != 0 {
		t.Errorf("invalid mails made %d requests", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*email.Config)
		want   string
	}{
		{"no key", func(c *email.Config) { c.APIKey = "" }, "APIKey (SENDGRID_API_KEY): is required"},
		{"key with newline", func(c *email.Config) { c.APIKey = testKey + "\n" }, "APIKey (SENDGRID_API_KEY): contains white space"},
		{"bad scheme", func(c *email.Config) { c.BaseURL = "ftp://sendgrid.example" }, "BaseURL (SENDGRID_BASE_URL): scheme must be http or https"},
		{"no scheme", func(c *email.Config) { c.BaseURL = "127.0.0.1:12112" }, "BaseURL (SENDGRID_BASE_URL)"},
		{"no host", func(c *email.Config) { c.BaseURL = "http://" }, "BaseURL (SENDGRID_BASE_URL): has no host"},
		{"credentials", func(c *email.Config) { c.BaseURL = "https://user:" + testKey + "@api.sendgrid.com" }, "BaseURL (SENDGRID_BASE_URL): must not contain credentials"},
		{"query", func(c *email.Config) { c.BaseURL = "https://api.sendgrid.com?x=1" }, "BaseURL (SENDGRID_BASE_URL): must not have a query"},
		{"bad from", func(c *email.Config) { c.From = "receipts" }, "From (EMAIL_FROM): address \"receipts\" is not valid"},
		{"display name from", func(c *email.Config) { c.From = "Receipts <receipts@example.com>" }, "From (EMAIL_FROM): address \"Receipts <receipts@example.com>\" is not a bare address"},
		{"from without dotted domain", func(c *email.Config) { c.From = "receipts@localhost" }, "From (EMAIL_FROM): address \"receipts@localhost\" has no dotted domain"},
		{"control in from name", func(c *email.Config) { c.FromName = "Receipts\r\n" }, "FromName: contains control characters"},
		{"negative timeout", func(c *email.Config) { c.Timeout = -time.Second }, "Timeout: is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := email.Config{APIKey: testKey, From: "receipts@example.com"}
			tt.modify(&cfg)
			c, err := email.New(cfg)
			if c != nil || !errors.Is(err, email.ErrInvalidConfig) || !email.IsPermanent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one containing %q", err, tt.want)
			}
			assertNoKey(t, err)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	if _, err := email.New(email.Config{APIKey: testKey}); err != nil {
		t.Errorf("New with only an API key: %v", err)
	}
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	// An answer that echoes the request's credentials, as a misconfigured
	// proxy might.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, 400, "rejected "+r.Header.Get("Authorization"), r.Header.Get("Authorization"))
	}))
	defer echo.Close()
	_, err := newClient(t, echo.URL).Send(context.Background(), receipt("evt_1"))
	var e *email.Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, "[redacted]") {
		t.Errorf("echoed key not redacted: %v", err)
	}
	assertNoKey(t, err)

	// And every kind of failure against the simulator.
	sim, srv := newSim(t)
	c := newClient(t, srv.URL, func(c *email.Config) { c.Timeout = 200 * time.Millisecond })
	for _, f := range []sendgridsim.Fault{
		{Kind: sendgridsim.FaultErrorBefore, Status: 400},
		{Kind: sendgridsim.FaultErrorAfter},
		{Kind: sendgridsim.FaultLostAfter},
		{Kind: sendgridsim.FaultRateLimit},
		{Kind: sendgridsim.FaultDelay, Delay: time.Second},
	} {
		sim.ClearFaults()
		sim.AddFault(f)
		_, err := c.Send(context.Background(), receipt("evt_1"))
		if err == nil {
			t.Errorf("%s: no error", f.Kind)
		}
		assertNoKey(t, err)
	}
	_, err = newClient(t, srv.URL, func(c *email.Config) { c.APIKey = testKey + "x" }).Send(context.Background(), receipt("evt_1"))
	if err == nil {
		t.Error("wrong key: no error")
	}
	assertNoKey(t, err)
}

func writeJSONError(w http.ResponseWriter, status int, message, field string) {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]any{{"message": message, "field": field, "help": nil}}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type countingTransport struct {
	n    atomic.Int32
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func TestCustomHTTPClient(t *testing.T) {
	_, srv := newSim(t)
	tr := &countingTransport{next: srv.Client().Transport}
	hc := &http.Client{Transport: tr}
	c := newClient(t, srv.URL, func(c *email.Config) { c.HTTPClient = hc })
	if _, err := c.Send(context.Background(), receipt("evt_1")); err != nil {
		t.Fatal(err)
	}
	if tr.n.Load() != 1 {
		t.Errorf("custom transport saw %d requests, want 1", tr.n.Load())
	}
	if hc.CheckRedirect != nil {
		t.Error("New modified the caller's http.Client")
	}
}

func TestConcurrentSends(t *testing.T) {
	sim, srv := newSim(t)
	c := newClient(t, srv.URL)
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := c.Send(context.Background(), receipt(fmt.Sprintf("evt_%d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st := sim.Stats()
	if st.Deliveries != n || len(st.DeliveriesByKey) != n {
		t.Errorf("Stats() = %+v, want %d deliveries under %d keys", st, n, n)
	}
}

func TestIsPermanent(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{&email.Error{StatusCode: 400, Permanent: true}, true},
		{fmt.Errorf("activity: %w", &email.Error{StatusCode: 400, Permanent: true}), true},
		{&email.Error{StatusCode: 503}, false},
		{fmt.Errorf("x: %w", email.ErrInvalidMail), true},
		{fmt.Errorf("x: %w", email.ErrInvalidConfig), true},
	}
	for _, tt := range tests {
		if got := email.IsPermanent(tt.err); got != tt.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestValidateAddress(t *testing.T) {
	valid := []string{"a@example.com", "first.last+tag@sub.example.co.uk", "receipts@effectively.local", "josé@example.com"}
	invalid := []string{
		"", "example.com", "a@", "@example.com", "a@@example.com", "a b@example.com",
		"Ada <a@example.com>", "<a@example.com>", "a@example.com (comment)", "a@example.com\n",
		"a\x00@example.com", "a@localhost", "a@[127.0.0.1]", "a@example.com.", "a@example.com, b@example.com",
		strings.Repeat("l", 65) + "@example.com", "a@" + strings.Repeat("d", 250) + ".com",
	}
	for _, a := range valid {
		if err := email.ValidateAddress(a); err != nil {
			t.Errorf("ValidateAddress(%q) = %v, want nil", a, err)
		}
	}
	for _, a := range invalid {
		if err := email.ValidateAddress(a); err == nil {
			t.Errorf("ValidateAddress(%q) = nil, want an error", a)
		}
	}
}

// TestSendCarriesNamespace: with a key namespace, every mail carries it in
// custom_args next to the unchanged ledger key; without, it carries none
// (TestSendDelivers).
func TestSendCarriesNamespace(t *testing.T) {
	sim, srv := newSim(t)
	c, err := email.New(email.Config{APIKey: testKey, BaseURL: srv.URL, Namespace: "eu"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(context.Background(), receipt("evt_1")); err != nil {
		t.Fatalf("Send: %v", err)
	}
	want := map[string]string{"idempotency_key": "email:evt_1", "message_id": "evt_1", "effectively_namespace": "eu"}
	if got := sim.Messages()[0].CustomArgs; !reflect.DeepEqual(got, want) {
		t.Errorf("custom_args = %v, want %v", got, want)
	}
	for _, ns := range []string{"e/u", strings.Repeat("n", 65)} {
		_, err := email.New(email.Config{APIKey: testKey, Namespace: ns})
		if !errors.Is(err, email.ErrInvalidConfig) || !strings.Contains(err.Error(), "EFFECTIVELY_KEY_NAMESPACE") {
			t.Errorf("New(namespace %q) = %v, want ErrInvalidConfig naming EFFECTIVELY_KEY_NAMESPACE", ns, err)
		}
	}
}
