package email_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/sim/sendgridsim"
)

// Example sends a receipt through the SendGrid simulator, then shows that a
// lost answer leaves the caller with a transient error for a mail that was
// delivered.
func Example() {
	sim := sendgridsim.New(sendgridsim.Options{})
	srv := httptest.NewServer(sim)
	defer srv.Close()

	client, err := email.New(email.Config{
		APIKey:  "SG.example",
		BaseURL: srv.URL, // "" means https://api.sendgrid.com
		From:    "receipts@example.com",
		Timeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	receipt := email.Mail{
		IdempotencyKey: "email:evt_1",
		MessageID:      "evt_1",
		To:             "ada@example.com",
		Subject:        "Your receipt",
		Text:           "Thanks for your order.",
	}

	id, err := client.Send(context.Background(), receipt)
	fmt.Println("sent:", id != "", err)

	sim.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultLostAfter, Times: 1})
	_, err = client.Send(context.Background(), receipt)
	fmt.Println("lost answer, permanent:", email.IsPermanent(err))
	fmt.Println("deliveries:", sim.Stats().DeliveriesByKey["email:evt_1"])

	receipt.To = "Ada <ada@example.com>"
	_, err = client.Send(context.Background(), receipt)
	fmt.Println(err)
	// Output:
	// sent: true <nil>
	// lost answer, permanent: false
	// deliveries: 2
	// email: invalid mail: To: address "Ada <ada@example.com>" is not a bare address like name@example.com
}
