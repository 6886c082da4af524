package sendgridsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
)

func TestWebhooksDeliverSignedBatches(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(pub)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []map[string]any
		fail   = 1
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ok, err := eventwebhook.VerifySignature(verifier, body, r.Header.Get(eventwebhook.VerificationHTTPHeader), r.Header.Get(eventwebhook.TimestampHTTPHeader))
		mu.Lock()
		defer mu.Unlock()
		if err != nil || !ok {
			t.Errorf("batch does not verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if fail > 0 {
			fail--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var batch []map[string]any
		if err := json.Unmarshal(body, &batch); err != nil {
			t.Errorf("batch is not a JSON array: %v", err)
		}
		events = append(events, batch...)
	}))
	t.Cleanup(hook.Close)
	if err := sim.StartWebhooks(sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL, Copies: 2, MaxDelay: 30 * time.Millisecond, RetryInitial: 10 * time.Millisecond},
		Key:           key,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.StopWebhooks)
	mustSend(t, srv, officialMail("email:evt_1", "evt_1", "ada@example.com"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(events)
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events delivered, want 4 (processed and delivered, twice each)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	ids := map[string]int{}
	kinds := map[string]int{}
	x := sim.Messages()[0].XMessageID
	for _, ev := range events {
		id, _ := ev["sg_event_id"].(string)
		kind, _ := ev["event"].(string)
		ids[id]++
		kinds[kind]++
		if ev["idempotency_key"] != "email:evt_1" || ev["message_id"] != "evt_1" {
			t.Errorf("custom_args not echoed: %v", ev)
		}
		if sg, _ := ev["sg_message_id"].(string); len(sg) <= len(x) || sg[:len(x)] != x {
			t.Errorf("sg_message_id %q does not start with the X-Message-Id %q", sg, x)
		}
	}
	if len(ids) != 2 || kinds["processed"] != 2 || kinds["delivered"] != 2 {
		t.Errorf("events by id %v, by kind %v: want processed and delivered, each twice under one sg_event_id", ids, kinds)
	}
	if st := sim.WebhookStats(); st.Retries < 1 {
		t.Errorf("stats %+v: the 500 was not retried", st)
	}
}
