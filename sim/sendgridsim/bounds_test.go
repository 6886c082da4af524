package sendgridsim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/effectively/effectively/sim/sendgridsim"
)

// TestRecordedMailsAreBounded sends more mails than Options.MaxMessages:
// Messages and GET /_sim/messages hold exactly the newest MaxMessages,
// oldest first, and Stats still count every delivery.
func TestRecordedMailsAreBounded(t *testing.T) {
	const bound, n = 3, 10
	sim, srv := newSim(t, sendgridsim.Options{MaxMessages: bound})
	for i := range n {
		if resp := mustSend(t, srv, officialMail(fmt.Sprintf("email:evt_%d", i), fmt.Sprintf("evt_%d", i), "ada@example.com")); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("send %d: status %d", i, resp.StatusCode)
		}
	}
	msgs := sim.Messages()
	if len(msgs) != bound {
		t.Fatalf("%d mails recorded, want %d", len(msgs), bound)
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("email:evt_%d", n-bound+i); m.CustomArgs["idempotency_key"] != want {
			t.Errorf("mail %d has key %q, want %q (the newest, oldest first)", i, m.CustomArgs["idempotency_key"], want)
		}
	}
	status, _, body := do(t, srv, mustRequest(t, srv.URL+"/_sim/messages"))
	var listed []sendgridsim.Delivered
	if err := json.Unmarshal([]byte(body), &listed); status != http.StatusOK || err != nil || len(listed) != bound ||
		listed[bound-1].CustomArgs["idempotency_key"] != fmt.Sprintf("email:evt_%d", n-1) {
		t.Errorf("GET /_sim/messages: %d, %d mails (%v)", status, len(listed), err)
	}
	if st := sim.Stats(); st.Deliveries != n || len(st.DeliveriesByKey) != n {
		t.Errorf("stats: %d deliveries over %d keys, want %d over %d", st.Deliveries, len(st.DeliveriesByKey), n, n)
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
