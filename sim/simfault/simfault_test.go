package simfault_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/sim/simfault"
)

type match struct {
	ID string `json:"id,omitempty"`
}

type fault = simfault.Fault[match]

func byID(id string) func(match) bool {
	return func(m match) bool { return m.ID == "" || m.ID == id }
}

func TestValidate(t *testing.T) {
	for _, f := range []fault{
		{Kind: simfault.ErrorBefore},
		{Kind: simfault.ErrorAfter, Status: 503, Times: 2},
		{Kind: simfault.LostAfter},
		{Kind: simfault.RateLimit},
		{Kind: simfault.Delay, Delay: time.Millisecond},
	} {
		if err := f.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", f, err)
		}
	}
	for _, f := range []fault{
		{},
		{Kind: "explode"},
		{Kind: simfault.ErrorBefore, Status: 200},
		{Kind: simfault.Delay},
		{Kind: simfault.Delay, Delay: -time.Second},
		{Kind: simfault.RateLimit, Times: -1},
	} {
		if err := f.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", f)
		}
	}
}

func TestErrorStatus(t *testing.T) {
	if got := (fault{}).ErrorStatus(); got != 500 {
		t.Errorf("default ErrorStatus = %d, want 500", got)
	}
	if got := (fault{Status: 503}).ErrorStatus(); got != 503 {
		t.Errorf("ErrorStatus = %d, want 503", got)
	}
}

func TestFaultJSON(t *testing.T) {
	in := fault{Match: match{ID: "a"}, Kind: simfault.Delay, Delay: 1500 * time.Millisecond, Times: 3}
	b, err := json.Marshal(in)
	const want = `{"match":{"id":"a"},"kind":"delay","delay_ms":1500,"times":3}`
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v; want %s", b, err, want)
	}
	var out fault
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("round trip = %+v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"kind":"delay","delay":"1.5s"}`), &out); err != nil || out.Delay != 1500*time.Millisecond {
		t.Errorf("duration string: %+v, %v", out, err)
	}
	for _, bad := range []string{
		`{"kind":"delay","delay":"soon"}`,
		`{"kind":"delay","delay":"1s","delay_ms":5}`,
		`{"kind":"lost_after","remaining":1}`,
		`{"kind":"lost_after","match":{"idd":"a"}}`,
		`{"kind":"lost_after","tiems":1}`,
	} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestListTake(t *testing.T) {
	var l simfault.List[match]
	l.Add(fault{Match: match{ID: "b"}, Kind: simfault.ErrorBefore, Times: 1})
	l.Add(fault{Kind: simfault.ErrorBefore, Status: 503, Times: 2})
	l.Add(fault{Kind: simfault.LostAfter})

	// First match wins, in the order added; kinds filter.
	if f, ok := l.Take(byID("a"), simfault.ErrorBefore); !ok || f.Status != 503 {
		t.Fatalf("Take(a) = %+v, %v; want the 503 fault", f, ok)
	}
	if f, ok := l.Take(byID("b"), simfault.ErrorBefore); !ok || f.Match.ID != "b" {
		t.Fatalf("Take(b) = %+v, %v; want the fault for b", f, ok)
	}
	if f, ok := l.Take(byID("a"), simfault.ErrorBefore); !ok || f.Status != 503 {
		t.Fatalf("second Take(a) = %+v, %v; want the 503 fault", f, ok)
	}
	// Both limited faults are used up; the unlimited one stays.
	if _, ok := l.Take(byID("a"), simfault.ErrorBefore); ok {
		t.Error("a used-up fault fired")
	}
	for range 3 {
		if _, ok := l.Take(byID("a"), simfault.LostAfter); !ok {
			t.Error("the unlimited fault did not fire")
		}
	}
	armed := l.Armed()
	if len(armed) != 1 || armed[0].Fault.Kind != simfault.LostAfter || armed[0].Remaining != 0 {
		t.Errorf("Armed() = %+v, want the unlimited lost_after fault", armed)
	}
	l.Clear()
	if len(l.Armed()) != 0 {
		t.Error("Clear left faults")
	}
}

func TestListTakeAll(t *testing.T) {
	var l simfault.List[match]
	l.Add(fault{Kind: simfault.Delay, Delay: 1, Times: 1})
	l.Add(fault{Kind: simfault.ErrorBefore})
	l.Add(fault{Match: match{ID: "b"}, Kind: simfault.Delay, Delay: 2})
	l.Add(fault{Kind: simfault.Delay, Delay: 3, Times: 2})

	fired := l.TakeAll(byID("a"), simfault.Delay)
	if len(fired) != 2 || fired[0].Delay != 1 || fired[1].Delay != 3 {
		t.Fatalf("TakeAll = %+v, want the delays 1 and 3", fired)
	}
	armed := l.Armed()
	if len(armed) != 3 || armed[0].Fault.Kind != simfault.ErrorBefore || armed[1].Fault.Delay != 2 || armed[2].Remaining != 1 {
		t.Errorf("Armed() = %+v", armed)
	}
	b, err := json.Marshal(armed)
	const want = `[{"match":{},"kind":"error_before"},{"match":{"id":"b"},"kind":"delay","delay_ms":0},` +
		`{"match":{},"kind":"delay","delay_ms":0,"times":2,"remaining":1}]`
	if err != nil || string(b) != strings.ReplaceAll(want, `,"delay_ms":0`, "") {
		t.Errorf("Armed JSON = %s, %v", b, err)
	}
}

// sim is a minimal simulator behind the control API.
type sim struct {
	mu      sync.Mutex
	faults  simfault.List[match]
	latency time.Duration
	resets  int
}

func newControl(t *testing.T) (*sim, func(method, path, body string) (int, string)) {
	t.Helper()
	s := &sim{}
	mux := http.NewServeMux()
	locked := func(f func()) {
		s.mu.Lock()
		defer s.mu.Unlock()
		f()
	}
	simfault.Control[match]{
		Stats: func() any { return map[string]int{"resets": s.resets} },
		Faults: func() (a []simfault.Armed[match]) {
			locked(func() { a = s.faults.Armed() })
			return a
		},
		AddFault:    func(f fault) { locked(func() { s.faults.Add(f) }) },
		ClearFaults: func() { locked(s.faults.Clear) },
		Reset:       func() { locked(func() { s.resets++ }) },
		Latency: func() (d time.Duration) {
			locked(func() { d = s.latency })
			return d
		},
		SetLatency: func(d time.Duration) { locked(func() { s.latency = d }) },
	}.Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return s, func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

func TestControl(t *testing.T) {
	s, control := newControl(t)
	check := func(method, path, body string, wantStatus int, want string) {
		t.Helper()
		if status, got := control(method, path, body); status != wantStatus || got != want+"\n" {
			t.Errorf("%s %s %s = %d %s, want %d %s", method, path, body, status, got, wantStatus, want)
		}
	}
	check("POST", "/_sim/faults", `{"match":{"id":"a"},"kind":"lost_after","times":1}`, 201,
		`{"match":{"id":"a"},"kind":"lost_after","times":1}`)
	check("POST", "/_sim/faults", `{"kind":"delay","delay":"1.5s"}`, 201, `{"match":{},"kind":"delay","delay_ms":1500}`)
	check("GET", "/_sim/faults", "", 200,
		`{"faults":[{"match":{"id":"a"},"kind":"lost_after","times":1,"remaining":1},{"match":{},"kind":"delay","delay_ms":1500}]}`)
	for _, bad := range []string{`{"kind":"explode"}`, `{"kind":"delay"}`, `{"kind":"rate_limit"} {}`, `not json`} {
		if status, body := control("POST", "/_sim/faults", bad); status != 400 || !strings.HasPrefix(body, `{"error":"`) {
			t.Errorf("POST /_sim/faults %s = %d %s, want 400 with an error", bad, status, body)
		}
	}
	check("DELETE", "/_sim/faults", "", 200, `{"ok":true}`)
	check("GET", "/_sim/faults", "", 200, `{"faults":[]}`)
	check("POST", "/_sim/latency", `{"latency_ms":120}`, 200, `{"latency_ms":120}`)
	check("GET", "/_sim/latency", "", 200, `{"latency_ms":120}`)
	for _, bad := range []string{`{}`, `{"latency_ms":-1}`, `{"latency":5}`} {
		if status, _ := control("POST", "/_sim/latency", bad); status != 400 {
			t.Errorf("POST /_sim/latency %s = %d, want 400", bad, status)
		}
	}
	check("POST", "/_sim/reset", "", 200, `{"ok":true}`)
	check("GET", "/_sim/stats", "", 200, `{"resets":1}`)
	if s.latency != 120*time.Millisecond {
		t.Errorf("latency = %v", s.latency)
	}
}

func TestSleep(t *testing.T) {
	if !simfault.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep did not wait")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if simfault.Sleep(ctx, time.Minute) || simfault.Sleep(ctx, 0) {
		t.Error("Sleep with a done context reported a full wait")
	}
}

func TestDropConnection(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		simfault.DropConnection(w)
	}))
	defer ts.Close()
	resp, err := ts.Client().Get(ts.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want a transport error", resp.Status)
	}

	defer func() {
		if r := recover(); !errors.Is(asError(r), http.ErrAbortHandler) {
			t.Errorf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	simfault.DropConnection(httptest.NewRecorder())
}

func asError(r any) error {
	err, _ := r.(error)
	return err
}
