package sim_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sendgrid/sendgrid-go"
	"github.com/sendgrid/sendgrid-go/helpers/mail"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
)

// A test of your own consumer: charge with stripe-go and mail with
// sendgrid-go against the simulators, deliver the same message twice, and
// check at the providers that it charged once. The mail has no idempotency
// key at SendGrid, so the second send is a second delivery: that is what an
// email ledger of your own must prevent.
func Example() {
	stripeSim := stripesim.New(stripesim.Options{})
	stripeSrv := httptest.NewServer(stripeSim)
	defer stripeSrv.Close()
	mailSim := sendgridsim.New(sendgridsim.Options{})
	mailSrv := httptest.NewServer(mailSim)
	defer mailSrv.Close()

	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(stripeSrv.URL),
		MaxNetworkRetries: stripe.Int64(0),
	})
	sc := &client.API{}
	sc.Init("sk_test_example", &stripe.Backends{API: backend, Connect: backend, Uploads: backend})

	handle := func(messageID string) {
		params := &stripe.PaymentIntentParams{
			Amount:        stripe.Int64(4200),
			Currency:      stripe.String("eur"),
			PaymentMethod: stripe.String("pm_card_visa"),
			Confirm:       stripe.Bool(true),
		}
		params.AddMetadata("message_id", messageID)
		params.SetIdempotencyKey("payment:" + messageID) // derived from the message, never random
		pi, err := sc.PaymentIntents.New(params)
		if err != nil {
			fmt.Println("charge:", err)
			return
		}
		m := mail.NewSingleEmail(mail.NewEmail("Shop", "shop@example.com"), "Your receipt",
			mail.NewEmail("", "customer@example.com"), "Paid.", "")
		m.SetCustomArg("idempotency_key", "email:"+messageID)
		req := sendgrid.GetRequest("SG.example", "/v3/mail/send", mailSrv.URL)
		req.Method = "POST"
		req.Body = mail.GetRequestBody(m)
		resp, err := sendgrid.API(req)
		if err != nil {
			fmt.Println("mail:", err)
			return
		}
		fmt.Println(pi.Status, resp.StatusCode)
	}
	handle("evt_91c2")
	handle("evt_91c2") // the broker delivered it again

	fmt.Println("charges:", stripeSim.Stats().ChargesByMessage["evt_91c2"])
	fmt.Println("deliveries:", mailSim.Stats().DeliveriesByKey["email:evt_91c2"])
	// Output:
	// succeeded 202
	// succeeded 202
	// charges: 1
	// deliveries: 2
}
