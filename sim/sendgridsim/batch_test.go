package sendgridsim_test

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/simfault"
)

// hookPost is one POST the Event Webhook receiver got.
type hookPost struct {
	events []map[string]any
	size   int
	status int
}

// hookReceiver verifies every POST with eventwebhook.VerifySignature (what
// the worker's receiver calls), answers 500 to the first fail POSTs and
// records every POST. It returns the key to sign with and the posts so far.
func hookReceiver(t *testing.T, fail int) (*httptest.Server, func() []hookPost, *ecdsa.PrivateKey) {
	t.Helper()
	key, pub, err := sendgridsim.GenerateWebhookKey()
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(pub)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		posts []hookPost
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ok, err := eventwebhook.VerifySignature(verifier, body, r.Header.Get(eventwebhook.VerificationHTTPHeader), r.Header.Get(eventwebhook.TimestampHTTPHeader))
		if err != nil || !ok {
			t.Errorf("batch does not verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var batch []map[string]any
		if err := json.Unmarshal(body, &batch); err != nil {
			t.Errorf("batch is not a JSON array: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		p := hookPost{events: batch, size: len(body), status: http.StatusOK}
		if fail > 0 {
			fail--
			p.status = http.StatusInternalServerError
		}
		posts = append(posts, p)
		w.WriteHeader(p.status)
	}))
	t.Cleanup(hook.Close)
	return hook, func() []hookPost {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(posts)
	}, key
}

// waitPosts waits until n POSTs were answered 2xx and returns all POSTs.
func waitPosts(t *testing.T, posts func() []hookPost, n int) []hookPost {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := posts()
		ok := 0
		for _, p := range ps {
			if p.status == http.StatusOK {
				ok++
			}
		}
		if ok >= n {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d POSTs answered 2xx, want %d: %v", ok, n, ps)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startHooks(t *testing.T, sim *sendgridsim.Server, o sendgridsim.WebhookOptions) {
	t.Helper()
	if err := sim.StartWebhooks(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.StopWebhooks)
}

func eventIDs(events []map[string]any) []string {
	var ids []string
	for _, ev := range events {
		id, _ := ev["sg_event_id"].(string)
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// TestWebhooksBatchWindow: with a BatchWindow, the events of several mails
// sent within it arrive in one signed POST, one JSON array.
func TestWebhooksBatchWindow(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 0)
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL, RetryInitial: 10 * time.Millisecond},
		Key:           key,
		BatchWindow:   time.Second,
	})
	for i := range 3 {
		id := fmt.Sprintf("evt_b%d", i)
		mustSend(t, srv, officialMail("email:"+id, id, "ada@example.com"))
	}
	waitPosts(t, posts, 1)
	time.Sleep(50 * time.Millisecond) // a second POST would be a bug
	ps := posts()
	if len(ps) != 1 {
		t.Fatalf("%d POSTs, want the 6 events of 3 mails in one: %v", len(ps), ps)
	}
	keys, kinds := map[any]int{}, map[any]int{}
	for _, ev := range ps[0].events {
		keys[ev["idempotency_key"]]++
		kinds[ev["event"]]++
	}
	if len(ps[0].events) != 6 || len(keys) != 3 || kinds["processed"] != 3 || kinds["delivered"] != 3 {
		t.Fatalf("batch of %d events by key %v by kind %v, want processed and delivered of 3 mails", len(ps[0].events), keys, kinds)
	}
	// In order of occurrence within the batch: each mail's processed
	// before its delivered.
	seen := map[any]bool{}
	for _, ev := range ps[0].events {
		if ev["event"] == "delivered" && !seen[ev["idempotency_key"]] {
			t.Errorf("delivered before processed for %v", ev["idempotency_key"])
		}
		seen[ev["idempotency_key"]] = true
	}
	if st := sim.WebhookStats(); st.Enqueued != 1 || st.Delivered != 1 {
		t.Errorf("stats %+v, want one batch enqueued and delivered", st)
	}
}

// TestWebhooksBatchRetriedWhole: a batch answered 500 is retried as the
// same batch, every event in it again, until a 2xx.
func TestWebhooksBatchRetriedWhole(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 2)
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL, RetryInitial: 10 * time.Millisecond},
		Key:           key,
		BatchWindow:   300 * time.Millisecond,
	})
	mustSend(t, srv, officialMail("email:evt_r1", "evt_r1", "ada@example.com"))
	mustSend(t, srv, officialMail("email:evt_r2", "evt_r2", "bob@example.com"))
	ps := waitPosts(t, posts, 1)
	if len(ps) != 3 {
		t.Fatalf("%d POSTs, want 2 failed and 1 delivered", len(ps))
	}
	want := eventIDs(ps[0].events)
	if len(want) != 4 {
		t.Fatalf("first batch has %d events, want 4", len(want))
	}
	for i, p := range ps[1:] {
		if got := eventIDs(p.events); !slices.Equal(got, want) {
			t.Errorf("attempt %d carried %v, want the whole batch %v", i+2, got, want)
		}
	}
	if st := sim.WebhookStats(); st.Enqueued != 1 || st.Delivered != 1 || st.Retries != 2 {
		t.Errorf("stats %+v, want one batch, retried twice, delivered", st)
	}
}

// TestWebhooksMaxBatch: a batch is posted once it holds MaxBatch events;
// the rest wait for their window.
func TestWebhooksMaxBatch(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 0)
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL},
		Key:           key,
		BatchWindow:   300 * time.Millisecond,
		MaxBatch:      4,
	})
	for i := range 3 {
		id := fmt.Sprintf("evt_m%d", i)
		mustSend(t, srv, officialMail("email:"+id, id, "ada@example.com"))
	}
	ps := waitPosts(t, posts, 2)
	var sizes []int
	var all []map[string]any
	for _, p := range ps {
		sizes = append(sizes, len(p.events))
		all = append(all, p.events...)
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{2, 4}) || len(eventIDs(all)) != 6 {
		t.Fatalf("batch sizes %v, want 4 then 2", sizes)
	}
}

// TestWebhooksMaxBatchBytes: a batch is posted before its body would pass
// MaxBatchBytes, without waiting for its window.
func TestWebhooksMaxBatchBytes(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 0)
	events := make([]string, 200) // about 50 KB of events a mail
	for i := range events {
		events[i] = "processed"
	}
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL},
		Key:           key,
		Events:        events,
		BatchWindow:   time.Minute,
	})
	for i := range 20 {
		id := fmt.Sprintf("evt_x%d", i)
		mustSend(t, srv, officialMail("email:"+id, id, "ada@example.com"))
	}
	ps := waitPosts(t, posts, 1)
	if p := ps[0]; p.size > sendgridsim.MaxBatchBytes || p.size < sendgridsim.MaxBatchBytes-1024 {
		t.Fatalf("batch of %d bytes (%d events), want just under %d", p.size, len(p.events), sendgridsim.MaxBatchBytes)
	}
}

// TestWebhooksDefaultOneEventPerPost: without a BatchWindow every event is
// posted alone, as before batching existed.
func TestWebhooksDefaultOneEventPerPost(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 0)
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL},
		Key:           key,
	})
	mustSend(t, srv, officialMail("email:evt_d1", "evt_d1", "ada@example.com"))
	mustSend(t, srv, officialMail("email:evt_d2", "evt_d2", "bob@example.com"))
	ps := waitPosts(t, posts, 4)
	for _, p := range ps {
		if len(p.events) != 1 {
			t.Errorf("a POST carried %d events, want 1", len(p.events))
		}
	}
	if len(ps) != 4 {
		t.Errorf("%d POSTs, want 4", len(ps))
	}
}

// TestWebhooksStopDropsOpenBatch: StopWebhooks within the window drops the
// open batch; nothing is posted after.
func TestWebhooksStopDropsOpenBatch(t *testing.T) {
	sim, srv := newSim(t, sendgridsim.Options{})
	hook, posts, key := hookReceiver(t, 0)
	startHooks(t, sim, sendgridsim.WebhookOptions{
		WebhookConfig: simfault.WebhookConfig{URL: hook.URL},
		Key:           key,
		BatchWindow:   100 * time.Millisecond,
	})
	mustSend(t, srv, officialMail("email:evt_s", "evt_s", "ada@example.com"))
	sim.StopWebhooks()
	time.Sleep(250 * time.Millisecond)
	if ps := posts(); len(ps) != 0 {
		t.Fatalf("%d POSTs after StopWebhooks, want none", len(ps))
	}
}
