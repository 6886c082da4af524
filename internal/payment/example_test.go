package payment_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/effectively/effectively/internal/payment"
	"github.com/effectively/effectively/sim/stripesim"
)

// A message delivered twice is charged once: both deliveries use the same
// idempotency key, and Stripe replays the first answer to the second.
func ExampleClient_Charge() {
	sim := stripesim.New(stripesim.Options{SearchLag: stripesim.NoSearchLag})
	srv := httptest.NewServer(sim)
	defer srv.Close()

	client, err := payment.New(payment.Config{APIKey: "sk_test_example", BaseURL: srv.URL})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := payment.ChargeRequest{
		IdempotencyKey: "payment:evt_1",
		MessageID:      "evt_1",
		OrderID:        7,
		Amount:         1999,
		Currency:       "usd",
		PaymentMethod:  "pm_card_visa",
	}
	for range 2 {
		ch, err := client.Charge(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ch.Status, "replayed:", ch.Replayed)
	}
	fmt.Println("charges:", sim.Stats().Charges)
	// Output:
	// succeeded replayed: false
	// succeeded replayed: true
	// charges: 1
}

// An activity decides from the error's class whether to give up, retry, or
// look the charge up first.
func ExampleClassify() {
	sim := stripesim.New(stripesim.Options{SearchLag: stripesim.NoSearchLag})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client, err := payment.New(payment.Config{APIKey: "sk_test_example", BaseURL: srv.URL})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	// Stripe charges, then fails with a 500 that it saves under the key.
	sim.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_2"}, Kind: stripesim.FaultErrorAfter, Times: 1})
	req := payment.ChargeRequest{IdempotencyKey: "payment:evt_2", MessageID: "evt_2",
		Amount: 500, Currency: "eur", PaymentMethod: "pm_card_visa"}

	for attempt := 1; attempt <= 5; attempt++ {
		ch, err := client.Charge(ctx, req)
		class := payment.Classify(err)
		fmt.Printf("attempt %d: %q\n", attempt, class)
		switch {
		case err == nil:
			fmt.Println("charged", ch.Amount, ch.Currency)
			return
		case class == payment.ClassAmbiguous:
			found, err := client.FindByMessageID(ctx, req.MessageID)
			if errors.Is(err, payment.ErrNotFound) {
				fmt.Println("not charged yet")
				return
			}
			fmt.Println("reconciled:", found.Status)
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
	// reconciled: succeeded
}
