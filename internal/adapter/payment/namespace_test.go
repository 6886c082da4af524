package payment

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/stripesim"
)

// keyRecorder wraps the simulator and records every Idempotency-Key it is
// sent.
type keyRecorder struct {
	next http.Handler
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		k.mu.Lock()
		k.keys = append(k.keys, key)
		k.mu.Unlock()
	}
	k.next.ServeHTTP(w, r)
}

func (k *keyRecorder) sent() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// sharedAccount is one simulated Stripe account, as several deployments
// share it, with a Client per namespace.
func sharedAccount(t *testing.T, namespaces ...string) (map[string]*Client, *stripesim.Server, *keyRecorder) {
	t.Helper()
	sim := stripesim.New(stripesim.Options{SearchLag: stripesim.NoSearchLag})
	rec := &keyRecorder{next: sim}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	clients := map[string]*Client{}
	for _, ns := range namespaces {
		c, err := New(Config{APIKey: testKey, BaseURL: ts.URL, Namespace: ns, MaxNetworkRetries: NoNetworkRetries})
		if err != nil {
			t.Fatalf("New(namespace %q): %v", ns, err)
		}
		clients[ns] = c
	}
	return clients, sim, rec
}

func intentRequest(messageID string) ChargeRequest {
	return ChargeRequest{
		IdempotencyKey: "paymentintent:" + messageID, MessageID: messageID, OrderID: 42,
		Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa",
	}
}

// TestNamespacesDoNotShareKeys: two deployments ("eu", "us") on one Stripe
// account charging the same message ID make two PaymentIntents. Without the
// namespace the second create replays the first's PaymentIntent, and its
// confirm is refused or replays a charge that is not its own.
func TestNamespacesDoNotShareKeys(t *testing.T) {
	clients, sim, rec := sharedAccount(t, "eu", "us")
	ctx := context.Background()
	var ids []string
	for _, ns := range []string{"eu", "us"} {
		created, err := clients[ns].Create(ctx, intentRequest("evt_1"))
		if err != nil {
			t.Fatalf("%s create: %v", ns, err)
		}
		if created.Replayed || created.Namespace != ns {
			t.Fatalf("%s create = %+v: want a new PaymentIntent of namespace %s", ns, created, ns)
		}
		ch, err := clients[ns].Confirm(ctx, created.PaymentIntentID, "payment:evt_1")
		if err != nil || !ch.Succeeded() || ch.Replayed {
			t.Fatalf("%s confirm = %+v, %v", ns, ch, err)
		}
		ids = append(ids, created.PaymentIntentID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("both deployments got PaymentIntent %s", ids[0])
	}
	if st := sim.Stats(); st.Charges != 2 || st.ChargesByMessage["evt_1"] != 2 {
		t.Errorf("stats = %+v, want 2 charges", st)
	}
	want := []string{"eu/paymentintent:evt_1", "eu/payment:evt_1", "us/paymentintent:evt_1", "us/payment:evt_1"}
	if got := rec.sent(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("keys sent = %q, want %q", got, want)
	}

	// Lookups see only their own namespace's PaymentIntent.
	now := time.Now()
	for i, ns := range []string{"eu", "us"} {
		found, err := clients[ns].FindInWindow(ctx, "evt_1", now.Add(-time.Minute), now.Add(time.Minute))
		if err != nil || found.PaymentIntentID != ids[i] {
			t.Errorf("%s FindInWindow = %+v, %v; want %s", ns, found, err, ids[i])
		}
		found, err = clients[ns].FindByMessageID(ctx, "evt_1")
		if err != nil || found.PaymentIntentID != ids[i] {
			t.Errorf("%s FindByMessageID = %+v, %v; want %s", ns, found, err, ids[i])
		}
	}
}

// TestNamespaceLookupIgnoresOthers: "us" finds nothing for a message only
// "eu" (or a deployment without a namespace) charged, and a deployment
// without a namespace ignores "eu"'s PaymentIntent too.
func TestNamespaceLookupIgnoresOthers(t *testing.T) {
	clients, _, _ := sharedAccount(t, "eu", "us", "")
	ctx := context.Background()
	eu, err := clients["eu"].Charge(ctx, chargeRequest("evt_eu"))
	if err != nil || !eu.Succeeded() {
		t.Fatalf("eu charge = %+v, %v", eu, err)
	}
	plain, err := clients[""].Charge(ctx, chargeRequest("evt_plain"))
	if err != nil || !plain.Succeeded() || plain.Namespace != "" {
		t.Fatalf("charge without namespace = %+v, %v", plain, err)
	}
	now := time.Now()
	from, to := now.Add(-time.Minute), now.Add(time.Minute)
	for _, tc := range []struct{ ns, msg string }{{"us", "evt_eu"}, {"", "evt_eu"}, {"us", "evt_plain"}, {"eu", "evt_plain"}} {
		if found, err := clients[tc.ns].FindInWindow(ctx, tc.msg, from, to); !errors.Is(err, ErrNotFound) {
			t.Errorf("namespace %q FindInWindow(%s) = %+v, %v; want ErrNotFound", tc.ns, tc.msg, found, err)
		}
		if found, err := clients[tc.ns].FindByMessageID(ctx, tc.msg); !errors.Is(err, ErrNotFound) {
			t.Errorf("namespace %q FindByMessageID(%s) = %+v, %v; want ErrNotFound", tc.ns, tc.msg, found, err)
		}
	}
	if found, err := clients[""].FindInWindow(ctx, "evt_plain", from, to); err != nil || found.PaymentIntentID != plain.PaymentIntentID {
		t.Errorf("FindInWindow without namespace = %+v, %v", found, err)
	}

	// Refunds: "us" refunding under the same message ID and key does not
	// replay "eu"'s refund, and FindRefund sees only its own.
	req := RefundRequest{IdempotencyKey: "refund:evt_r", MessageID: "evt_r", PaymentIntentID: eu.PaymentIntentID, Amount: 100}
	r1, err := clients["eu"].Refund(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clients["us"].FindRefund(ctx, eu.PaymentIntentID, "evt_r"); !errors.Is(err, ErrNotFound) {
		t.Errorf("us FindRefund of eu's refund: %v, want ErrNotFound", err)
	}
	r2, err := clients["us"].Refund(ctx, req)
	if err != nil || r2.ID == r1.ID || r2.Replayed {
		t.Fatalf("us refund = %+v, %v; want a refund of its own (eu's is %s)", r2, err, r1.ID)
	}
	if got, err := clients["eu"].FindRefund(ctx, eu.PaymentIntentID, "evt_r"); err != nil || got.ID != r1.ID {
		t.Errorf("eu FindRefund = %+v, %v; want %s", got, err, r1.ID)
	}
}

// TestNoNamespaceKeepsKeys: the default (no namespace) sends the keys as
// given, "payment:evt_…", and no namespace metadata.
func TestNoNamespaceKeepsKeys(t *testing.T) {
	clients, _, rec := sharedAccount(t, "")
	c := clients[""]
	ctx := context.Background()
	created, err := c.Create(ctx, intentRequest("evt_1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Confirm(ctx, created.PaymentIntentID, "payment:evt_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Charge(ctx, chargeRequest("evt_2")); err != nil {
		t.Fatal(err)
	}
	want := []string{"paymentintent:evt_1", "payment:evt_1", "payment:evt_2"}
	if got := rec.sent(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("keys sent = %q, want %q", got, want)
	}
	if created.Namespace != "" {
		t.Errorf("namespace metadata %q without a namespace", created.Namespace)
	}
}

// TestNamespaceLongMessageID: a 255-character message ID under the longest
// namespace is sent with a key Stripe accepts (the simulator refuses keys
// over 255 characters), hashed like identity.Key hashes.
func TestNamespaceLongMessageID(t *testing.T) {
	ns := strings.Repeat("n", 64)
	clients, sim, rec := sharedAccount(t, ns)
	// A 255-character ID has a hashed key already; a 247-character one a
	// plain key of 255 characters, too long once scoped.
	id := strings.Repeat("m", 255)
	req := intentRequest(id)
	req.IdempotencyKey = identity.MustKey(identity.EffectPaymentIntent, id)
	if _, err := clients[ns].Create(context.Background(), req); err != nil {
		t.Fatalf("create: %v", err)
	}
	req2 := chargeRequest(id[:247])
	req2.IdempotencyKey = identity.MustKey(identity.EffectPayment, id[:247])
	if _, err := clients[ns].Charge(context.Background(), req2); err != nil {
		t.Fatalf("charge: %v", err)
	}
	for _, k := range rec.sent() {
		if len(k) > MaxIdempotencyKeyLen || !strings.HasPrefix(k, ns+"/") {
			t.Errorf("key %q (%d characters)", k, len(k))
		}
	}
	if got := rec.sent(); len(got) != 2 || !strings.Contains(got[1], ":~") {
		t.Errorf("keys sent = %q, want the second one hashed", got)
	}
	if sim.Stats().Charges != 1 {
		t.Errorf("charges = %d", sim.Stats().Charges)
	}
}

func TestNamespaceIsValidated(t *testing.T) {
	for _, ns := range []string{"e/u", "eu:1", strings.Repeat("n", 65), "é"} {
		_, err := New(Config{APIKey: testKey, Namespace: ns})
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "EFFECTIVELY_KEY_NAMESPACE") {
			t.Errorf("New(namespace %q) = %v, want ErrInvalidConfig naming EFFECTIVELY_KEY_NAMESPACE", ns, err)
		}
	}
}
