package activities_test

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// testAttempt is the start-to-close of the test environment's activities.
const testAttempt = 10 * time.Minute

// lateClients points f's clients at the simulators with send margins:
// pay for Stripe, mail for SendGrid.
func lateClients(t *testing.T, f *fixture, pay, mail time.Duration) {
	t.Helper()
	pc, err := payment.New(payment.Config{APIKey: "sk_test_testenv", BaseURL: f.sims.StripeURL, Timeout: 10 * time.Second, SendMargin: pay})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := email.New(email.Config{APIKey: "SG.testenv", BaseURL: f.sims.SendGridURL, From: "receipts@example.com", Timeout: 5 * time.Second, SendMargin: mail})
	if err != nil {
		t.Fatal(err)
	}
	f.acts.Payments, f.acts.Mailer = pc, mc
}

// TestEffectsTooNearTheirDeadlineSendNothing: a charge, a refund and a
// receipt whose attempt has less time left than the send margin send
// nothing: each attempt ends TooLate (retryable), the provider saw no
// request, and the next attempt, with time, sends each once.
func TestEffectsTooNearTheirDeadlineSendNothing(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	paid(t, f, "evt_tl_p", 81) // before the margins: the refund's payment
	lateClients(t, f, testAttempt+time.Minute, testAttempt+time.Minute)
	stripe0, mail0 := f.sims.Stripe.Stats().Requests, f.sims.SendGrid.Stats().Deliveries

	in := charge("evt_tl_c", 82, "pm_card_visa")
	if _, err := run(t, f, f.acts.ChargeOrder, in); !isType(err, activities.ErrTypeTooLate) {
		t.Fatalf("charge: err = %v, want %s", err, activities.ErrTypeTooLate)
	}
	if p, err := f.db.PaymentOf(context.Background(), in.Consumer, in.MessageID); err == nil && p.State == store.PaymentUnknown {
		t.Fatalf("a charge not sent left the payment unknown: %+v", p)
	}
	rf := refundOf("evt_tl_r", 81, 300)
	if _, err := run(t, f, f.acts.RefundOrder, rf); !isType(err, activities.ErrTypeTooLate) {
		t.Fatalf("refund: err = %v, want %s", err, activities.ErrTypeTooLate)
	}
	rc := receipt("evt_tl_c", 82)
	if _, err := run(t, f, f.acts.SendReceipt, rc); !isType(err, activities.ErrTypeTooLate) {
		t.Fatalf("receipt: err = %v, want %s", err, activities.ErrTypeTooLate)
	}
	if n, m := f.sims.Stripe.Stats().Requests-stripe0, f.sims.SendGrid.Stats().Deliveries-mail0; n != 0 || m != 0 {
		t.Fatalf("too late, yet stripe got %d requests and sendgrid delivered %d mails", n, m)
	}

	lateClients(t, f, 0, 0)
	if r, err := run(t, f, f.acts.ChargeOrder, in); err != nil || r.Outcome != activities.PaymentPaid {
		t.Fatalf("charge retry = %+v, %v", r, err)
	}
	if r, err := run(t, f, f.acts.RefundOrder, rf); err != nil || r.Outcome != activities.RefundRefunded {
		t.Fatalf("refund retry = %+v, %v", r, err)
	}
	if r, err := run(t, f, f.acts.SendReceipt, rc); err != nil || r.Outcome != activities.ReceiptSent {
		t.Fatalf("receipt retry = %+v, %v", r, err)
	}
	st, ms := f.sims.Stripe.Stats(), f.sims.SendGrid.Stats()
	if st.ChargesByMessage["evt_tl_c"] != 1 || st.RefundsByMessage["evt_tl_r"] != 1 || st.Replays != 0 || ms.DeliveriesByKey["email:evt_tl_c"] != 1 {
		t.Fatalf("charges %v, refunds %v, replays %d, mails %v; want one of each, no replay",
			st.ChargesByMessage, st.RefundsByMessage, st.Replays, ms.DeliveriesByKey)
	}
}

// TestChargeNearItsDeadlineSendsNoConfirm: the create leaves too little of
// the attempt for the confirm. The confirm is not sent, the PaymentIntent's
// ID is recorded, and the next attempt confirms it: one request, no create
// again, no replayed answer. Sent that late, the confirm could be cut by
// the deadline after Stripe charged, and the next attempt would replay it.
func TestChargeNearItsDeadlineSendsNoConfirm(t *testing.T) {
	f := newFixture(t, "")
	// The create is sent within its first second, the confirm a second
	// later (the simulator's latency) is not.
	lateClients(t, f, testAttempt-time.Second, 0)
	f.sims.Stripe.SetLatency(1200 * time.Millisecond)
	in := charge("evt_tl_confirm", 83, "pm_card_visa")
	if _, err := run(t, f, f.acts.ChargeOrder, in); !isType(err, activities.ErrTypeTooLate) {
		t.Fatalf("err = %v, want %s (the confirm not sent)", err, activities.ErrTypeTooLate)
	}
	p, err := f.db.PaymentOf(context.Background(), in.Consumer, in.MessageID)
	if err != nil || p.PaymentIntentID == "" {
		t.Fatalf("payment = %+v, %v; want the created PaymentIntent's ID recorded", p, err)
	}
	f.sims.Stripe.SetLatency(0)
	lateClients(t, f, 0, 0)
	wantRetryConfirmsOnly(t, f, in, p.PaymentIntentID)
}

// TestReceiptNotSentIsSentAtOnceByTheNext: a receipt given back unsent
// (too late here; a rate-limit deferral takes the same path) leaves nothing
// for the next attempt to fear. At-most-once sends it instead of settling
// it unknown (a lost receipt); at-least-once sends it without waiting the
// resend grace for SendGrid's event of a send that never happened.
func TestReceiptNotSentIsSentAtOnceByTheNext(t *testing.T) {
	for _, policy := range []store.EmailPolicy{store.AtMostOnce, store.AtLeastOnce} {
		t.Run(string(policy), func(t *testing.T) {
			f := newFixture(t, policy)
			f.acts.ResendGrace = 5 * time.Second
			lateClients(t, f, 0, testAttempt+time.Minute)
			rc := receipt("evt_unsent", 84)
			if _, err := run(t, f, f.acts.SendReceipt, rc); !isType(err, activities.ErrTypeTooLate) {
				t.Fatalf("err = %v, want %s", err, activities.ErrTypeTooLate)
			}
			lateClients(t, f, 0, 0)
			start := time.Now()
			r, err := run(t, f, f.acts.SendReceipt, rc)
			if took := time.Since(start); err != nil || r.Outcome != activities.ReceiptSent || took > 3*time.Second {
				t.Fatalf("retry = %+v, %v after %s; want sent, without the 5s grace", r, err, took.Round(time.Millisecond))
			}
			if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:evt_unsent"]; n != 1 {
				t.Fatalf("%d deliveries, want 1", n)
			}
		})
	}
}
