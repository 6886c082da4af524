package message_test

import (
	"errors"
	"fmt"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake/route"
)

func ExampleDecode() {
	raw := []byte(`{"id": "evt_91c2", "type": "order.placed",
 "data": {"order_id": 42, "amount": 1999, "currency": "USD",
          "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`)
	m, err := message.Decode(raw, route.Default())
	if err != nil {
		fmt.Println(err)
		return
	}
	o, ok := m.Value.(*message.OrderPlaced)
	if !ok {
		return
	}
	fmt.Println(m.ID, m.Type, "->", m.Consumer)
	fmt.Println(o.OrderID, o.Amount, o.Currency, o.CustomerEmail, o.PaymentMethod)

	_, err = message.Decode([]byte(`{"id": "evt_91c3", "type": "order.placed",
 "data": {"order_id": 42, "amount": 19.99, "currency": "usd",
          "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`), route.Default())
	var e *message.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, e.Field)
		fmt.Println(err)
	}
	// Output:
	// evt_91c2 order.placed -> order-placed
	// 42 1999 usd ada@example.com pm_card_visa
	// wrong_type data.amount
	// invalid message: data.amount: must be a positive integer number of minor units, got 19.99 (write an integer, without a fraction or exponent)
}
