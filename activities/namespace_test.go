package activities_test

import (
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestChargeOrderNamespacesShareAStripeAccount: two deployments, "eu" and
// "us", each with its own Postgres, share one Stripe account and both get a
// message with the same ID. Each charges its own PaymentIntent. Without the
// key namespace the second deployment's create and confirm replay the
// first one's, and it records a payment that is not its own as paid.
func TestChargeOrderNamespacesShareAStripeAccount(t *testing.T) {
	sims := testenv.StartSims(t)
	in := charge("evt_shared", 42, "pm_card_visa")
	ids := map[string]string{}
	for _, ns := range []string{"eu", "us"} {
		pc, err := payment.New(payment.Config{APIKey: "sk_test_" + ns, BaseURL: sims.StripeURL, Timeout: 10 * time.Second, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		f := &fixture{
			acts: &activities.Activities{Store: store.New(storetest.NewPool(t)), Payments: pc, Mailer: sims.EmailClient(t)},
			sims: sims,
		}
		res, err := run(t, f, f.acts.ChargeOrder, in)
		if err != nil || res.Outcome != activities.PaymentPaid || res.Replayed {
			t.Fatalf("%s: %+v, %v; want paid, not replayed", ns, res, err)
		}
		ch, err := pc.Get(t.Context(), res.PaymentIntentID)
		if err != nil || ch.Namespace != ns {
			t.Fatalf("%s: payment intent %+v, %v; want one of namespace %s", ns, ch, err, ns)
		}
		ids[ns] = res.PaymentIntentID
	}
	if ids["eu"] == ids["us"] {
		t.Fatalf("both deployments recorded PaymentIntent %s", ids["eu"])
	}
	if n := sims.Stripe.Stats().ChargesByMessage["evt_shared"]; n != 2 {
		t.Fatalf("charges = %d, want 2 (one per deployment)", n)
	}
}
