package activities_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/simlimit"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// limitedFixture is a fixture whose provider clients go through the shared
// limiter with cfg's Stripe limits.
func limitedFixture(t *testing.T, cfg ratelimit.Config) *fixture {
	t.Helper()
	sims := testenv.StartSims(t)
	db := store.New(storetest.NewPool(t))
	l, err := ratelimit.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := payment.New(payment.Config{APIKey: "sk_test_testenv", BaseURL: sims.StripeURL, Timeout: 10 * time.Second, Limit: l.Transport})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := email.New(email.Config{APIKey: "SG.testenv", BaseURL: sims.SendGridURL, From: "receipts@example.com", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{acts: &activities.Activities{Store: db, Payments: pc, Mailer: mc, AmbiguousAttempts: 2}, sims: sims, db: db}
}

// TestChargeDeferredByTheRateLimit: a charge whose slot is beyond the
// limiter's wait is not sent: the attempt ends RateLimited with a
// NextRetryDelay, Stripe saw no request, the payment is not unknown; the
// next attempt, once the slot is there, charges once.
func TestChargeDeferredByTheRateLimit(t *testing.T) {
	limit := ratelimit.Rate{PerSecond: 0.25, Burst: 1} // a slot every 4s
	f := limitedFixture(t, ratelimit.Config{Provider: "stripe", Global: limit, MaxWait: 100 * time.Millisecond})
	// Take the only slot.
	l, _ := ratelimit.New(f.db, ratelimit.Config{Provider: "stripe", Global: limit})
	if err := l.Wait(context.Background(), "GET /v1/x"); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, f, f.acts.ChargeOrder, charge("evt_rl1", 71, "pm_card_visa"))
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeRateLimited || app.NonRetryable() || app.NextRetryDelay() <= 0 {
		t.Fatalf("err = %v, want a retryable %s with a NextRetryDelay", err, activities.ErrTypeRateLimited)
	}
	if n := f.sims.Stripe.Stats().Requests; n != 0 {
		t.Fatalf("stripe got %d requests from a deferred charge", n)
	}
	if p, err := f.db.PaymentOf(context.Background(), "order-placed", "evt_rl1"); err == nil && p.State == store.PaymentUnknown {
		t.Fatalf("a deferred charge left the payment unknown: %+v", p)
	}
	// The next attempt, allowed to wait for both its slots (the create and
	// the confirm), charges once.
	l2, _ := ratelimit.New(f.db, ratelimit.Config{Provider: "stripe", Global: limit, MaxWait: 10 * time.Second})
	pc, err := payment.New(payment.Config{APIKey: "sk_test_testenv", BaseURL: f.sims.StripeURL, Timeout: 10 * time.Second, Limit: l2.Transport})
	if err != nil {
		t.Fatal(err)
	}
	f.acts.Payments = pc
	if r, err := run(t, f, f.acts.ChargeOrder, charge("evt_rl1", 71, "pm_card_visa")); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	if st := f.sims.Stripe.Stats(); st.ChargesByMessage["evt_rl1"] != 1 {
		t.Fatalf("charges %v, want one", st.ChargesByMessage)
	}
}

// TestChargeWhoseConfirmIsDeferredKeepsItsPaymentIntent: the create got
// its slot and the confirm did not: the PaymentIntent's ID is recorded, so
// the next attempt confirms it without creating it again (no replay of the
// create's key, one request fewer at the limit), and charges once.
func TestChargeWhoseConfirmIsDeferredKeepsItsPaymentIntent(t *testing.T) {
	confirm := "POST /v1/payment_intents/{id}/confirm"
	slow := map[string]ratelimit.Rate{confirm: {PerSecond: 0.25, Burst: 1}} // a confirm every 4s
	f := limitedFixture(t, ratelimit.Config{Provider: "stripe", Endpoints: slow, MaxWait: 100 * time.Millisecond, ExpressShare: -1})
	// Take the only confirm slot.
	l, _ := ratelimit.New(f.db, ratelimit.Config{Provider: "stripe", Endpoints: slow, ExpressShare: -1})
	if err := l.Wait(context.Background(), confirm); err != nil {
		t.Fatal(err)
	}
	in := charge("evt_rl_confirm", 72, "pm_card_visa")
	if _, err := run(t, f, f.acts.ChargeOrder, in); !isType(err, activities.ErrTypeRateLimited) {
		t.Fatalf("err = %v, want %s (the confirm not sent)", err, activities.ErrTypeRateLimited)
	}
	p, err := f.db.PaymentOf(context.Background(), "order-placed", "evt_rl_confirm")
	if err != nil || p.PaymentIntentID == "" {
		t.Fatalf("payment = %+v, %v; want the created PaymentIntent's ID recorded", p, err)
	}
	l2, _ := ratelimit.New(f.db, ratelimit.Config{Provider: "stripe", Endpoints: slow, MaxWait: 10 * time.Second})
	pc, err := payment.New(payment.Config{APIKey: "sk_test_testenv", BaseURL: f.sims.StripeURL, Timeout: 10 * time.Second, Limit: l2.Transport})
	if err != nil {
		t.Fatal(err)
	}
	f.acts.Payments = pc
	wantRetryConfirmsOnly(t, f, in, p.PaymentIntentID)
}

// TestChargesUnderTheSimulatorsLimits: 30 charges at once against a
// simulator enforcing Stripe's per-endpoint limit: paced by the limiter
// under it, every charge succeeds once and the simulator answers no 429.
func TestChargesUnderTheSimulatorsLimits(t *testing.T) {
	f := limitedFixture(t, ratelimit.Config{Provider: "stripe", Global: ratelimit.Rate{PerSecond: 40, Burst: 5}, Endpoint: ratelimit.Rate{PerSecond: 8, Burst: 4}})
	f.sims.Stripe.SetRateLimits(stripesim.RateLimits{Global: simlimit.Rate{PerSecond: 50}, Endpoint: simlimit.Rate{PerSecond: 10, Burst: 10}})
	const n = 30
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			in := charge(fmt.Sprintf("evt_rl_%d", i), int64(700+i), "pm_card_visa")
			for {
				r, err := run(t, f, f.acts.ChargeOrder, in)
				if _, deferred := ratelimit.Deferred(err); deferred || isType(err, activities.ErrTypeRateLimited) {
					time.Sleep(200 * time.Millisecond) // Temporal's NextRetryDelay, by hand
					continue
				}
				if err == nil && r.Outcome != activities.PaymentPaid {
					err = fmt.Errorf("outcome %s", r.Outcome)
				}
				errs[i] = err
				return
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st := f.sims.Stripe.Stats()
	if st.Charges != n || st.RateLimited != 0 {
		t.Fatalf("charges %d (want %d), 429s %d %v (want 0)", st.Charges, n, st.RateLimited, st.RateLimitedByReason)
	}
	if el := time.Since(start); el < time.Duration(float64(n-4)/8*float64(time.Second))*9/10 {
		t.Fatalf("%d charges in %s: faster than the 8/s endpoint limit allows", n, el)
	}
}

// TestLocalChargeStepsAsideInABacklog: a local attempt waits at most
// LocalRateWait for its slot; with the slot 4 s away (a backlog's line) it
// ends RateLimited at once, sending nothing, where the regular activity,
// allowed the limiter's full wait, takes the slot and charges once.
func TestLocalChargeStepsAsideInABacklog(t *testing.T) {
	limit := ratelimit.Rate{PerSecond: 0.25, Burst: 1} // a slot every 4s
	f := limitedFixture(t, ratelimit.Config{Provider: "stripe", Global: limit, ExpressShare: -1})
	l, _ := ratelimit.New(f.db, ratelimit.Config{Provider: "stripe", Global: limit})
	if err := l.Wait(context.Background(), "GET /v1/x"); err != nil { // the line: the next slot in 4s
		t.Fatal(err)
	}
	start := time.Now()
	lc, err := run(t, f, f.acts.ChargeOrderLocally, charge("evt_rl_local", 73, "pm_card_visa"))
	if err != nil || lc.Err == nil || lc.Err.Type != activities.ErrTypeRateLimited {
		t.Fatalf("local attempt = %+v, %v; want its error RateLimited", lc, err)
	}
	if took := time.Since(start); took > activities.LocalRateWait+time.Second {
		t.Fatalf("the local attempt took %s at the limit, want at most about %s", took, activities.LocalRateWait)
	}
	if n := f.sims.Stripe.Stats().Requests; n != 0 {
		t.Fatalf("stripe got %d requests from a local attempt sent back", n)
	}
	// The regular attempt waits its turn (both slots: create and confirm).
	if r, err := run(t, f, f.acts.ChargeOrder, charge("evt_rl_local", 73, "pm_card_visa")); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("regular attempt = %+v, %v", r, err)
	}
	if st := f.sims.Stripe.Stats(); st.ChargesByMessage["evt_rl_local"] != 1 {
		t.Fatalf("charges %v, want one", st.ChargesByMessage)
	}
}
