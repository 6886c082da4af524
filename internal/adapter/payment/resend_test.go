package payment

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/sim/stripesim"
)

// noBuckets is Postgres out of reach: the limiter paces with its own
// bucket.
type noBuckets struct{}

func (noBuckets) ReserveRate(context.Context, store.Reservation) (store.Reserved, error) {
	return store.Reserved{}, errors.New("connection refused")
}
func (noBuckets) PauseRate(context.Context, []string, time.Duration) error {
	return errors.New("connection refused")
}

// TestResendDeferredAfterALostAnswerIsNotUnsent: Stripe made the refund and
// its answer was lost; stripe-go's retry of the same request found no slot
// at the rate limit. The call's error must not say "not sent" (which would
// let a caller release its claim and skip the lookup): the refund exists.
func TestResendDeferredAfterALostAnswerIsNotUnsent(t *testing.T) {
	sim := stripesim.New(stripesim.Options{SearchLag: stripesim.NoSearchLag})
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)
	plain, err := New(Config{APIKey: testKey, BaseURL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ch, err := plain.Charge(ctx, chargeRequest("evt_resend"))
	if err != nil {
		t.Fatal(err)
	}
	// One slot, then none within MaxWait.
	l, err := ratelimit.New(noBuckets{}, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 0.1, Burst: 1}, MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{APIKey: testKey, BaseURL: ts.URL, Limit: l.Transport})
	if err != nil {
		t.Fatal(err)
	}
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_resend_r"}, Kind: stripesim.FaultLostAfter, Times: 1})
	_, err = c.Refund(ctx, RefundRequest{IdempotencyKey: "refund:evt_resend_r", MessageID: "evt_resend_r", PaymentIntentID: ch.PaymentIntentID, Amount: 100})
	if err == nil {
		t.Fatal("the refund's resend went out; want it refused by the limit")
	}
	if _, ok := ratelimit.Deferred(err); ok || deadline.TooLate(err) {
		t.Fatalf("the call says not sent, though its first send made the refund: %v", err)
	}
	if found, err := plain.FindRefund(ctx, ch.PaymentIntentID, "evt_resend_r"); err != nil {
		t.Fatalf("the refund at Stripe: %+v, %v", found, err)
	}
}
