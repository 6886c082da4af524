package message

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// The order.placed type and the consumer that handles it.
const (
	// TypeOrderPlaced is the type of a message announcing a placed order,
	// whose data is an OrderPlaced.
	TypeOrderPlaced = "order.placed"
	// ConsumerOrderPlaced is the consumer name that handles order.placed.
	// It is a valid identity consumer name.
	ConsumerOrderPlaced = "order-placed"
)

// OrderPlacedSchema validates order.placed data into an *OrderPlaced.
var OrderPlacedSchema = Schema{typ: TypeOrderPlaced, decode: func(data *object) (any, *Error) {
	o, err := decodeOrderPlaced(data)
	if err != nil {
		return nil, err
	}
	return o, nil
}}

// OrderPlaced is the data of an order.placed message: a customer placed an
// order, to be charged and sent a receipt.
type OrderPlaced struct {
	// OrderID identifies the order: a positive integer of at most 2^53-1,
	// so that it survives a round trip through any JSON implementation.
	OrderID int64 `json:"order_id"`
	// Amount is the amount to charge in minor units of Currency (cents for
	// usd, yen for jpy): a positive integer of at most 99999999, the
	// largest amount Stripe accepts.
	Amount int64 `json:"amount"`
	// Currency is a lower-case ISO 4217 code from a known list. Input in
	// any letter case is accepted and normalized to lower case.
	Currency string `json:"currency"`
	// CustomerEmail is the single address the receipt goes to; see
	// ValidateEmail.
	CustomerEmail string `json:"customer_email"`
	// PaymentMethod is a Stripe PaymentMethod ID: "pm_" followed by
	// letters, digits and underscores, 4 to 255 characters in all.
	PaymentMethod string `json:"payment_method"`
}

// Limits of OrderPlaced fields.
const (
	maxOrderID          = 1<<53 - 1
	maxAmount           = 99999999
	maxPaymentMethodLen = 255
)

// orderPlacedFields are the fields of order.placed data, in the order they
// are validated.
var orderPlacedFields = []string{"order_id", "amount", "currency", "customer_email", "payment_method"}

// currencies are the accepted ISO 4217 codes.
var currencies = map[string]bool{
	"aud": true, "brl": true, "cad": true, "chf": true, "czk": true,
	"dkk": true, "eur": true, "gbp": true, "hkd": true, "inr": true,
	"jpy": true, "mxn": true, "nok": true, "nzd": true, "pln": true,
	"sek": true, "sgd": true, "usd": true,
}

var currencyList = func() string {
	list := make([]string, 0, len(currencies))
	for c := range currencies {
		list = append(list, c)
	}
	sort.Strings(list)
	return strings.Join(list, " ")
}()

// decodeOrderPlaced validates the data object of an order.placed message.
func decodeOrderPlaced(data *object) (*OrderPlaced, *Error) {
	for _, mb := range data.members {
		if !contains(orderPlacedFields, mb.key) {
			return nil, newError(CodeUnknownField, joinPath("data", mb.key),
				"unknown field; %s data has only the fields %s", TypeOrderPlaced, strings.Join(orderPlacedFields, ", "))
		}
	}
	var (
		o   OrderPlaced
		err *Error
	)
	if o.OrderID, err = positiveInt(data, "order_id", "a positive integer", maxOrderID); err != nil {
		return nil, err
	}
	if o.Amount, err = positiveInt(data, "amount", "a positive integer number of minor units", maxAmount); err != nil {
		return nil, err
	}
	if o.Currency, err = currency(data); err != nil {
		return nil, err
	}
	if o.CustomerEmail, err = stringField(data, "data", "customer_email"); err != nil {
		return nil, err
	}
	if e := ValidateEmail(o.CustomerEmail); e != nil {
		return nil, newError(CodeInvalid, "data.customer_email", "%s", e.Error())
	}
	if o.PaymentMethod, err = paymentMethod(data); err != nil {
		return nil, err
	}
	return &o, nil
}

// positiveInt returns the field name of data, which must be a JSON integer
// literal between 1 and limit. what describes the expected value in errors.
func positiveInt(data *object, name, what string, limit int64) (int64, *Error) {
	path := joinPath("data", name)
	v, err := required(data, "data", name)
	if err != nil {
		return 0, err
	}
	num, ok := v.(json.Number)
	if !ok {
		return 0, newError(CodeType, path, "must be %s, got %s", what, describe(v))
	}
	s := string(num)
	if strings.ContainsAny(s, ".eE") {
		return 0, newError(CodeType, path, "must be %s, got %s (write an integer, without a fraction or exponent)", what, literal(s))
	}
	if strings.HasPrefix(s, "-") || s == "0" {
		return 0, newError(CodeInvalid, path, "must be %s, got %s", what, literal(s))
	}
	n, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || n > limit {
		return 0, newError(CodeInvalid, path, "must be %s of at most %d, got %s", what, limit, literal(s))
	}
	return n, nil
}

// currency returns the currency field of data, in lower case.
func currency(data *object) (string, *Error) {
	const path = "data.currency"
	s, err := stringField(data, "data", "currency")
	if err != nil {
		return "", err
	}
	lower := strings.ToLower(s)
	if len(s) != 3 || !isLowerASCII(lower) || !currencies[lower] {
		return "", newError(CodeInvalid, path, "unknown currency %s; accepted are the ISO 4217 codes %s", quote(s), currencyList)
	}
	return lower, nil
}

func isLowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// paymentMethod returns the payment_method field of data.
func paymentMethod(data *object) (string, *Error) {
	const path = "data.payment_method"
	s, err := stringField(data, "data", "payment_method")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(s, "pm_") {
		return "", newError(CodeInvalid, path, `must be a Stripe PaymentMethod ID starting with "pm_"`)
	}
	if len(s) < 4 || len(s) > maxPaymentMethodLen {
		return "", newError(CodeInvalid, path, "must be 4 to %d characters long, got %d", maxPaymentMethodLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' {
			return "", newError(CodeInvalid, path, "has character %q at byte %d; allowed are A-Z a-z 0-9 _", c, i)
		}
	}
	return s, nil
}
