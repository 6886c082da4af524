package payment_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/sim/stripesim"
)

// newClient returns a Client of the Stripe simulator, which lags its
// Search by a minute as Stripe does.
func newClient() (*payment.Client, *stripesim.Server, func()) {
	sim := stripesim.New(stripesim.Options{})
	srv := httptest.NewServer(sim)
	client, err := payment.New(payment.Config{APIKey: "sk_test_example", BaseURL: srv.URL})
	if err != nil {
		panic(err)
	}
	return client, sim, srv.Close
}

// A message delivered twice is charged once, as ChargeOrder does it: create
// the PaymentIntent under its create key, confirm it under the payment key,
// record its ID; the second delivery sends the same requests under the same
// keys and Stripe replays both answers. The recorded ID is read back with
// Get, which is strongly consistent.
func ExampleClient_Create() {
	client, sim, done := newClient()
	defer done()
	ctx := context.Background()
	req := payment.ChargeRequest{
		IdempotencyKey: "paymentintent:evt_1", // identity.Key(EffectPaymentIntent, …)
		MessageID:      "evt_1",
		OrderID:        7,
		Amount:         1999,
		Currency:       "usd",
		PaymentMethod:  "pm_card_visa",
	}
	var recorded string // the payments row's payment_intent_id
	for range 2 {
		pi, err := client.Create(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		ch, err := client.Confirm(ctx, pi.PaymentIntentID, "payment:evt_1")
		if err != nil {
			fmt.Println(err)
			return
		}
		recorded = ch.PaymentIntentID
		fmt.Println(ch.Status, "replayed:", pi.Replayed, ch.Replayed)
	}
	got, err := client.Get(ctx, recorded)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("retrieved:", got.Status, "charges:", sim.Stats().Charges)
	// Output:
	// succeeded replayed: false false
	// succeeded replayed: true true
	// retrieved: succeeded charges: 1
}

// An ambiguous confirmation (Stripe saved a 500 under the key, so retrying
// the key only replays it) is settled by retrieving the PaymentIntent by
// its ID, never by Search.
func ExampleClassify() {
	client, sim, done := newClient()
	defer done()
	ctx := context.Background()
	// Stripe charges, then fails with a 500 that it saves under the key.
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{IdempotencyKey: "payment:evt_2"}, Kind: stripesim.FaultErrorAfter, Times: 1})
	pi, err := client.Create(ctx, payment.ChargeRequest{IdempotencyKey: "paymentintent:evt_2", MessageID: "evt_2",
		Amount: 500, Currency: "eur", PaymentMethod: "pm_card_visa"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for attempt := 1; attempt <= 5; attempt++ {
		ch, err := client.Confirm(ctx, pi.PaymentIntentID, "payment:evt_2")
		class := payment.Classify(err)
		fmt.Printf("attempt %d: %q\n", attempt, class)
		switch {
		case err == nil:
			fmt.Println("charged", ch.Amount, ch.Currency)
			return
		case class == payment.ClassAmbiguous:
			got, err := client.Get(ctx, pi.PaymentIntentID)
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println("retrieved:", got.Status)
			return
		case class.Retryable():
			continue
		default:
			fmt.Println("giving up:", err)
			return
		}
	}
	// Output:
	// attempt 1: "transient"
	// attempt 2: "ambiguous"
	// retrieved: succeeded
}

// A retry whose create key has expired and that finds no ID recorded looks
// over the claim's time window instead of creating again. A recent window
// is listed, which is strongly consistent: Search, a minute behind, would
// not see the PaymentIntent yet.
func ExampleClient_FindInWindow() {
	client, _, done := newClient()
	defer done()
	ctx := context.Background()
	claimed := time.Now().Add(-time.Second) // the payments row's created_at
	if _, err := client.Create(ctx, payment.ChargeRequest{IdempotencyKey: "paymentintent:evt_3", MessageID: "evt_3",
		Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa"}); err != nil {
		fmt.Println(err)
		return
	}
	found, err := client.FindInWindow(ctx, "evt_3", claimed, time.Now().Add(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _, _ := found.Verdict()
	fmt.Println("found:", found.MessageID, v)
	// Output:
	// found: evt_3 unconfirmed
}
