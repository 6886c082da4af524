package codec

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const testToken = "s3cret-operator-token-0123456789"

func newTestServer(t *testing.T, keys *Keyring) *httptest.Server {
	t.Helper()
	h, err := NewServerHandler(NewCodec(keys), DefaultCORSOrigins(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// reply is a codec server's answer, its body read and closed.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}
}

// post sends payloads to the codec server as the Temporal UI does.
func post(t *testing.T, url, auth string, ps []*commonpb.Payload) reply {
	t.Helper()
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: ps})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "default")
	req.Header.Set("Origin", "http://localhost:8233")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return do(t, req)
}

func readPayloads(t *testing.T, r reply) []*commonpb.Payload {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out commonpb.Payloads
	if err := protojson.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("decode response %s: %v", r.body, err)
	}
	return out.GetPayloads()
}

func TestServerCORSPreflight(t *testing.T) {
	srv := newTestServer(t, mustKeyring(t, testKey("k1", 1)))
	preflight := func(origin string) reply {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodOptions, srv.URL+"/decode", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-namespace")
		return do(t, req)
	}

	for _, origin := range DefaultCORSOrigins() {
		resp := preflight(origin) // no token: browsers send preflights without one
		if resp.status != http.StatusNoContent {
			t.Errorf("%s: preflight status = %d, want 204", origin, resp.status)
		}
		if got := resp.header.Get("Access-Control-Allow-Origin"); got != origin {
			t.Errorf("%s: Access-Control-Allow-Origin = %q", origin, got)
		}
		allowed := strings.ToLower(resp.header.Get("Access-Control-Allow-Headers"))
		for _, h := range []string{"x-namespace", "authorization", "content-type"} {
			if !strings.Contains(allowed, h) {
				t.Errorf("%s: Access-Control-Allow-Headers = %q lacks %s", origin, allowed, h)
			}
		}
		if got := resp.header.Get("Access-Control-Allow-Methods"); !strings.Contains(got, "POST") {
			t.Errorf("%s: Access-Control-Allow-Methods = %q", origin, got)
		}
	}

	resp := preflight("https://evil.example")
	if resp.status != http.StatusForbidden || resp.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("foreign origin: status %d, Access-Control-Allow-Origin %q; want 403 and none",
			resp.status, resp.header.Get("Access-Control-Allow-Origin"))
	}
}

func TestServerRequiresToken(t *testing.T) {
	keys := mustKeyring(t, testKey("k1", 1))
	srv := newTestServer(t, keys)
	enc, err := NewCodec(keys).Encode(plainPayloads(t)[:1])
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range []string{
		"",
		"Bearer",
		"Bearer wrong-token-wrong-token-wrong",
		"Bearer " + testToken[:len(testToken)-1],
		"Bearer " + testToken + "x",
		"Basic " + testToken,
		testToken,
	} {
		for _, path := range []string{"/decode", "/encode"} {
			r := post(t, srv.URL+path, auth, enc)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: status %d, want 401", path, auth, r.status)
			}
			if bytes.Contains(r.body, []byte("ada@example.com")) || bytes.Contains(r.body, []byte("payloads")) {
				t.Errorf("%s with Authorization %q: answered %s", path, auth, r.body)
			}
		}
	}
}

func TestServerRoundTrip(t *testing.T) {
	keys := mustKeyring(t, testKey("k1", 1))
	srv := newTestServer(t, keys)
	plain := plainPayloads(t)

	r := post(t, srv.URL+"/encode", "Bearer "+testToken, plain)
	if got := r.header.Get("Access-Control-Allow-Origin"); got != "http://localhost:8233" {
		t.Errorf("Access-Control-Allow-Origin on POST = %q", got)
	}
	enc := readPayloads(t, r)
	if len(enc) != len(plain) {
		t.Fatalf("encoded %d payloads, want %d", len(enc), len(plain))
	}
	for _, p := range enc {
		checkEncrypted(t, p, "k1")
	}
	// What the server encrypted, the worker's codec reads.
	if _, err := NewCodec(keys).Decode(enc); err != nil {
		t.Fatalf("local decode of server-encoded payloads: %v", err)
	}

	dec := readPayloads(t, post(t, srv.URL+"/decode", "bearer "+testToken, enc))
	for i := range plain {
		if !proto.Equal(dec[i], plain[i]) {
			t.Errorf("payload %d: decoded %v, want %v", i, dec[i], plain[i])
		}
	}
}

// TestServerWithSDKRemoteCodec decodes through the SDK's own remote codec
// client, as `temporal workflow show --codec-endpoint … --codec-auth …` does.
func TestServerWithSDKRemoteCodec(t *testing.T) {
	keys := mustKeyring(t, testKey("k1", 1))
	srv := newTestServer(t, keys)
	remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{
		Endpoint: srv.URL,
		ModifyRequest: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+testToken)
			return nil
		},
	})
	enc, err := NewCodec(keys).Encode(plainPayloads(t))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := remote.Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range plainPayloads(t) {
		if !proto.Equal(dec[i], want) {
			t.Errorf("payload %d: decoded %v, want %v", i, dec[i], want)
		}
	}
}

func TestNewServerHandlerErrors(t *testing.T) {
	c := NewCodec(mustKeyring(t, testKey("k1", 1)))
	cases := []struct {
		name    string
		origins []string
		token   string
		want    string
	}{
		{"no token", DefaultCORSOrigins(), "", "token is required"},
		{"short token", DefaultCORSOrigins(), "short", "want at least 16"},
		{"wildcard origin", []string{"*"}, testToken, `"*"`},
		{"origin with path", []string{"http://localhost:8233/namespaces"}, testToken, "scheme://host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewServerHandler(c, tc.origins, tc.token)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if tc.token != "" && strings.Contains(err.Error(), tc.token) {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

func TestLoadServerConfig(t *testing.T) {
	cfg, err := LoadServerConfig(env(nil))
	if err != nil || cfg.Enabled() {
		t.Fatalf("unset: %+v, %v; want off", cfg, err)
	}
	cfg, err = LoadServerConfig(env(map[string]string{EnvServerAddr: "127.0.0.1:8234", EnvToken: testToken}))
	if err != nil || !cfg.Enabled() || cfg.Addr != "127.0.0.1:8234" || cfg.Token != testToken ||
		strings.Join(cfg.Origins, ",") != "http://localhost:8233,http://127.0.0.1:8233" {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	if s := cfg.String(); strings.Contains(s, testToken) || !strings.Contains(s, "redacted") {
		t.Errorf("String() = %q, want the token redacted", s)
	}
	cfg, err = LoadServerConfig(env(map[string]string{
		EnvServerAddr: ":8234", EnvToken: testToken, EnvCORSOrigins: "https://temporal.example.com, http://localhost:8080",
	}))
	if err != nil || strings.Join(cfg.Origins, ",") != "https://temporal.example.com,http://localhost:8080" {
		t.Fatalf("origins: %+v, %v", cfg, err)
	}

	bad := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no token", map[string]string{EnvServerAddr: ":8234"}, EnvToken},
		{"short token", map[string]string{EnvServerAddr: ":8234", EnvToken: "tooshort"}, EnvToken},
		{"bad addr", map[string]string{EnvServerAddr: "8234", EnvToken: testToken}, EnvServerAddr},
		{"bad origin", map[string]string{EnvServerAddr: ":8234", EnvToken: testToken, EnvCORSOrigins: "localhost:8233"}, EnvCORSOrigins},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadServerConfig(env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "tooshort") {
				t.Errorf("error %q shows the token", err)
			}
		})
	}
}

func TestServeStopsWithContext(t *testing.T) {
	h, err := NewServerHandler(NewCodec(mustKeyring(t, testKey("k1", 1))), DefaultCORSOrigins(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- serve(ctx, ln, h, logger) }()

	dec := readPayloads(t, post(t, "http://"+ln.Addr().String()+"/decode", "Bearer "+testToken, plainPayloads(t)))
	if len(dec) != len(plainPayloads(t)) {
		t.Errorf("decoded %d payloads", len(dec))
	}
	// The address is taken now: Serve must say so rather than hang.
	if err := Serve(context.Background(), ln.Addr().String(), h, logger); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Serve on a busy address: err = %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

// TestServeShutdownPastTheGraceIsNotAFailure: a request still open when the
// shutdown grace (5 s) runs out is cut and logged; serve returns nil, so a
// clean SIGTERM of the worker still exits 0.
func TestServeShutdownPastTheGraceIsNotAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	slowHandler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	})
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, slowHandler, logger) }()
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/decode", "application/json", strings.NewReader("{}"))
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve with a request open past the grace: %v; want nil (logged, not a failed exit)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after the grace")
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the cut request was not logged as a warning:\n%s", logs.String())
	}
}
