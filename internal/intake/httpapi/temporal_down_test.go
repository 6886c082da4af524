package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/tools/testenv"
)

// TestTemporalDown: with Temporal unreachable the message is still recorded
// and answered 202; the dispatcher starts it once Temporal answers, and a
// retry meanwhile is the same answer. Nothing is charged twice.
func TestTemporalDown(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	dead, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	in, err := intake.New(s.Store, dead, intake.Config{TaskQueue: s.TaskQueue, Logger: testenv.Logger(t), StartRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{s: s, client: &http.Client{Timeout: 60 * time.Second}}
	tokens := t.TempDir() + "/tokens"
	writeTokens(t, tokens, "checkout "+httpapi.HashToken(checkoutToken)+" order.placed")
	api, err := httpapi.New(in, dead, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: tokens, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeAPI(t, api)
	e.base = "http://" + addr

	start := time.Now()
	first := e.post(t, "evt_td1", order("evt_td1", 9201, 900))
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("the answer with Temporal down took %s: the start is bounded, the dispatcher does the rest", took)
	}
	acc := first.accepted(t)
	if acc.Decision != httpapi.DecisionStarted {
		t.Fatalf("with Temporal down: %s", first.body)
	}
	st := inboxRow(t, s, "evt_td1")
	if st.Inbox == nil || st.Inbox.State != "pending" {
		t.Fatalf("inbox row %+v, want pending for the dispatcher", st.Inbox)
	}
	if again := e.post(t, "evt_td1", order("evt_td1", 9201, 900)); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry while Temporal is down: %d %s", again.code, again.body)
	}
	// Temporal answers again: the dispatcher of a process that reaches it
	// starts the pending row.
	disp, err := intake.NewDispatcher(s.Intake, intake.DispatcherConfig{Logger: testenv.Logger(t), Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(context.Background())
	ddone := make(chan struct{})
	go func() { _ = disp.Run(dctx); close(ddone) }()
	t.Cleanup(func() { dcancel(); <-ddone })
	testenv.Eventually(t, 30*time.Second, "evt_td1 paid", func() bool { return inboxRow(t, s, "evt_td1").Processed != nil })
	if n := s.Sims.Stripe.Stats().ChargesByMessage["evt_td1"]; n != 1 {
		t.Fatalf("charges of evt_td1: %d", n)
	}
}
