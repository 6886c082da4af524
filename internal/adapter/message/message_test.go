package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/leaf/identity"
)

func TestDecodeRejects(t *testing.T) {
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	tests := []struct {
		name  string
		in    string
		code  string
		field string
	}{
		// Whole-message problems.
		{"empty", "", CodeSyntax, ""},
		{"whitespace only", " \n\t ", CodeSyntax, ""},
		{"not JSON", `{"id": evt_91c2}`, CodeSyntax, ""},
		{"truncated", `{"id":"evt_91c2","type":"order.placed","data":{"order_id":42`, CodeSyntax, ""},
		{"truncated inside string", `{"id":"evt_9`, CodeSyntax, ""},
		{"trailing comma", `{"id":"evt_91c2",}`, CodeSyntax, ""},
		{"single quotes", `{'id':'evt_91c2'}`, CodeSyntax, ""},
		{"NaN", order(map[string]string{"amount": "NaN"}), CodeSyntax, ""},
		{"leading zero", order(map[string]string{"amount": "01999"}), CodeSyntax, ""},
		{"raw tab in string", "{\"id\":\"evt\t1\"}", CodeSyntax, ""},
		{"trailing garbage", validMessage + " x", CodeSyntax, ""},
		{"two objects", validMessage + validMessage, CodeSyntax, ""},
		{"array at top level", `[` + validMessage + `]`, CodeNotObject, ""},
		{"string at top level", `"evt_91c2"`, CodeNotObject, ""},
		{"null at top level", `null`, CodeNotObject, ""},
		{"number at top level", `42`, CodeNotObject, ""},
		{"byte order mark", "\xEF\xBB\xBF" + validMessage, CodeEncoding, ""},
		{"invalid UTF-8", envelope("\"evt_\xff\"", `"order.placed"`, dataWith(nil)), CodeEncoding, ""},
		{"over MaxSize", `{"id":"` + strings.Repeat("a", MaxSize) + `"}`, CodeTooLarge, ""},
		{"nested too deep", order(map[string]string{"x": deep}), CodeInvalid, "data.x" + strings.Repeat("[0]", maxDepth-2)},

		// Duplicate keys.
		{"duplicate top-level key", `{"id":"a","id":"evt_91c2","type":"order.placed","data":` + dataWith(nil) + `}`, CodeDuplicateKey, "id"},
		{"duplicate data key", order(map[string]string{"amount": `1, "amount": 100000`}), CodeDuplicateKey, "data.amount"},
		{"duplicate key by escape", order(map[string]string{"amount": `1, "\u0061mount": 100000`}), CodeDuplicateKey, "data.amount"},
		{"duplicate key in unknown field", `{"x":{"a":1,"a":2}}`, CodeDuplicateKey, "x.a"},

		// Unknown fields.
		{"unknown top-level field", `{"id":"evt_91c2","type":"order.placed","data":` + dataWith(nil) + `,"priority":1}`, CodeUnknownField, "priority"},
		{"unknown data field", order(map[string]string{"amount_cents": "1999"}), CodeUnknownField, "data.amount_cents"},
		{"data field in other case", order(map[string]string{"Amount": "1999"}), CodeUnknownField, "data.Amount"},
		{"unknown field with odd name", order(map[string]string{`"a.b"`[1:4]: "1"}), CodeUnknownField, `data["a.b"]`},

		// id.
		{"id missing", envelope("-", `"order.placed"`, dataWith(nil)), CodeMissing, "id"},
		{"id null", envelope("null", `"order.placed"`, dataWith(nil)), CodeMissing, "id"},
		{"id number", envelope("91", `"order.placed"`, dataWith(nil)), CodeType, "id"},
		{"id empty", envelope(`""`, `"order.placed"`, dataWith(nil)), CodeInvalid, "id"},
		{"id too long", envelope(`"`+strings.Repeat("a", identity.MaxMessageIDLen+1)+`"`, `"order.placed"`, dataWith(nil)), CodeInvalid, "id"},
		{"id bad character", envelope(`"evt/91c2"`, `"order.placed"`, dataWith(nil)), CodeInvalid, "id"},
		{"id with space", envelope(`"evt 91c2"`, `"order.placed"`, dataWith(nil)), CodeInvalid, "id"},
		{"id control character", envelope(`"evt\u000091c2"`, `"order.placed"`, dataWith(nil)), CodeInvalid, "id"},

		// type.
		{"type missing", envelope(`"evt_91c2"`, "-", dataWith(nil)), CodeMissing, "type"},
		{"type number", envelope(`"evt_91c2"`, "1", dataWith(nil)), CodeType, "type"},
		{"type unknown", envelope(`"evt_91c2"`, `"order.cancelled"`, dataWith(nil)), CodeUnknownType, "type"},
		{"type empty", envelope(`"evt_91c2"`, `""`, dataWith(nil)), CodeUnknownType, "type"},
		{"type control character", envelope(`"evt_91c2"`, `"order.placed\u007f"`, dataWith(nil)), CodeInvalid, "type"},

		// data.
		{"data missing", envelope(`"evt_91c2"`, `"order.placed"`, "-"), CodeMissing, "data"},
		{"data null", envelope(`"evt_91c2"`, `"order.placed"`, "null"), CodeMissing, "data"},
		{"data array", envelope(`"evt_91c2"`, `"order.placed"`, "[]"), CodeType, "data"},
		{"data string", envelope(`"evt_91c2"`, `"order.placed"`, `"{}"`), CodeType, "data"},
		{"data empty object", envelope(`"evt_91c2"`, `"order.placed"`, "{}"), CodeMissing, "data.order_id"},

		// data.order_id.
		{"order_id missing", order(map[string]string{"order_id": "-"}), CodeMissing, "data.order_id"},
		{"order_id zero", order(map[string]string{"order_id": "0"}), CodeInvalid, "data.order_id"},
		{"order_id negative", order(map[string]string{"order_id": "-42"}), CodeInvalid, "data.order_id"},
		{"order_id beyond 2^53-1", order(map[string]string{"order_id": "9007199254740992"}), CodeInvalid, "data.order_id"},
		{"order_id string", order(map[string]string{"order_id": `"42"`}), CodeType, "data.order_id"},
		{"order_id fraction", order(map[string]string{"order_id": "42.0"}), CodeType, "data.order_id"},

		// data.amount.
		{"amount missing", order(map[string]string{"amount": "-"}), CodeMissing, "data.amount"},
		{"amount null", order(map[string]string{"amount": "null"}), CodeMissing, "data.amount"},
		{"amount zero", order(map[string]string{"amount": "0"}), CodeInvalid, "data.amount"},
		{"amount negative", order(map[string]string{"amount": "-5"}), CodeInvalid, "data.amount"},
		{"amount negative zero", order(map[string]string{"amount": "-0"}), CodeInvalid, "data.amount"},
		{"amount float", order(map[string]string{"amount": "19.99"}), CodeType, "data.amount"},
		{"amount exponent", order(map[string]string{"amount": "1e3"}), CodeType, "data.amount"},
		{"amount string", order(map[string]string{"amount": `"1999"`}), CodeType, "data.amount"},
		{"amount boolean", order(map[string]string{"amount": "true"}), CodeType, "data.amount"},
		{"amount object", order(map[string]string{"amount": `{"value":1999}`}), CodeType, "data.amount"},
		{"amount above Stripe's limit", order(map[string]string{"amount": "100000000"}), CodeInvalid, "data.amount"},
		{"amount overflows int64", order(map[string]string{"amount": "99999999999999999999999"}), CodeInvalid, "data.amount"},
		{"amount huge literal", order(map[string]string{"amount": strings.Repeat("9", 5000)}), CodeInvalid, "data.amount"},

		// data.currency.
		{"currency missing", order(map[string]string{"currency": "-"}), CodeMissing, "data.currency"},
		{"currency unknown", order(map[string]string{"currency": `"xyz"`}), CodeInvalid, "data.currency"},
		{"currency numeric", order(map[string]string{"currency": "840"}), CodeType, "data.currency"},
		{"currency numeric string", order(map[string]string{"currency": `"840"`}), CodeInvalid, "data.currency"},
		{"currency too short", order(map[string]string{"currency": `"us"`}), CodeInvalid, "data.currency"},
		{"currency with space", order(map[string]string{"currency": `"usd "`}), CodeInvalid, "data.currency"},
		{"currency control character", order(map[string]string{"currency": `"us\nd"`}), CodeInvalid, "data.currency"},

		// data.customer_email.
		{"email missing", order(map[string]string{"customer_email": "-"}), CodeMissing, "data.customer_email"},
		{"email number", order(map[string]string{"customer_email": "1"}), CodeType, "data.customer_email"},
		{"email without @", order(map[string]string{"customer_email": `"ada.example.com"`}), CodeInvalid, "data.customer_email"},
		{"email with display name", order(map[string]string{"customer_email": `"Ada Lovelace <ada@example.com>"`}), CodeInvalid, "data.customer_email"},
		{"email in angle brackets", order(map[string]string{"customer_email": `"<ada@example.com>"`}), CodeInvalid, "data.customer_email"},
		{"two emails", order(map[string]string{"customer_email": `"ada@example.com, bob@example.com"`}), CodeInvalid, "data.customer_email"},
		{"email control character", order(map[string]string{"customer_email": `"ada@example.com\r\nBcc: eve@example.com"`}), CodeInvalid, "data.customer_email"},
		{"email too long", order(map[string]string{"customer_email": `"` + strings.Repeat("a", 64) + "@" + strings.Repeat("b", 200) + `.com"`}), CodeInvalid, "data.customer_email"},
		{"email without domain dot", order(map[string]string{"customer_email": `"ada@localhost"`}), CodeInvalid, "data.customer_email"},
		{"email non-ASCII", order(map[string]string{"customer_email": `"adä@example.com"`}), CodeInvalid, "data.customer_email"},

		// data.payment_method.
		{"payment_method missing", order(map[string]string{"payment_method": "-"}), CodeMissing, "data.payment_method"},
		{"payment_method wrong prefix", order(map[string]string{"payment_method": `"card_visa"`}), CodeInvalid, "data.payment_method"},
		{"payment_method prefix only", order(map[string]string{"payment_method": `"pm_"`}), CodeInvalid, "data.payment_method"},
		{"payment_method bad character", order(map[string]string{"payment_method": `"pm_card-visa"`}), CodeInvalid, "data.payment_method"},
		{"payment_method too long", order(map[string]string{"payment_method": `"pm_` + strings.Repeat("x", 253) + `"`}), CodeInvalid, "data.payment_method"},
		{"payment_method DEL", order(map[string]string{"payment_method": "\"pm_card\x7f\""}), CodeInvalid, "data.payment_method"},
		{"payment_method array", order(map[string]string{"payment_method": `["pm_card_visa"]`}), CodeType, "data.payment_method"},
	}
	seen := make(map[string]bool)
	for _, tt := range tests {
		if seen[tt.in] {
			t.Fatalf("%s: input is not distinct", tt.name)
		}
		seen[tt.in] = true
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.in), testTypes)
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", m)
			}
			if m != nil {
				t.Errorf("Decode returned a message with error %v", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if e.Code != tt.code || e.Field != tt.field {
				t.Errorf("got code %q field %q, want code %q field %q (%v)", e.Code, e.Field, tt.code, tt.field, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "invalid message: "+tt.field) {
				t.Errorf("error %q does not start by naming field %q", msg, tt.field)
			}
			if e.Problem == "" {
				t.Error("error has an empty Problem")
			}
			if len(msg) > 1024 {
				t.Errorf("error is %d bytes long", len(msg))
			}
			t.Log(msg)
		})
	}
}

// TestDecodeErrorText pins the wording of a few errors.
func TestDecodeErrorText(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{order(map[string]string{"amount": "-5"}), "invalid message: data.amount: must be a positive integer number of minor units, got -5"},
		{order(map[string]string{"amount": "19.99"}), "invalid message: data.amount: must be a positive integer number of minor units, got 19.99"},
		{order(map[string]string{"amount_cents": "1"}), "invalid message: data.amount_cents: unknown field"},
		{order(map[string]string{"amount": `"1999"`}), `invalid message: data.amount: must be a positive integer number of minor units, got string "1999"`},
		{order(map[string]string{"amount": "100000000"}), "invalid message: data.amount: must be a positive integer number of minor units of at most 99999999, got 100000000"},
		{envelope(`"evt_91c2"`, `"order.cancelled"`, "{}"), `invalid message: type: unknown type "order.cancelled"; known types are order.placed`},
		{`{"id":"a","id":"b"}`, "invalid message: id: duplicate key"},
		{`[]`, "invalid message: a message must be a JSON object, got an array"},
		{`{"id": x}`, "invalid message: invalid JSON at byte offset 7: invalid character 'x' looking for beginning of value"},
		{validMessage + "x", "invalid message: unexpected data at byte offset 185 after the end of the top-level value"},
		{`{"id":"` + strings.Repeat("a", MaxSize) + `"}`, "invalid message: message is 65545 bytes, the limit is 65536"},
		{"{\"id\":\"\xff\"}", "invalid message: message is not valid UTF-8: bad byte at offset 7"},
		{order(map[string]string{"currency": `"xyz"`}), `invalid message: data.currency: unknown currency "xyz"; accepted are the ISO 4217 codes aud brl cad chf czk dkk eur gbp hkd inr jpy mxn nok nzd pln sek sgd usd`},
		{order(map[string]string{"customer_email": `"Ada <ada@example.com>"`}), `invalid message: data.customer_email: email address has a display name; give only the address`},
		{order(map[string]string{"customer_email": `"ada@example.com bob@example.com"`}), `invalid message: data.customer_email: email address is not valid: expected single address`},
		{order(map[string]string{"payment_method": `"card_visa"`}), `invalid message: data.payment_method: must be a Stripe PaymentMethod ID starting with "pm_"`},
		{`"{\"id\":\"evt_1\"}"`, `invalid message: a message must be a JSON object, got a string (a JSON object encoded as a string?)`},
		{envelope(`"evt_91c2"`, `"order.placed"`, `"{\"order_id\":42}"`), `invalid message: data: must be an object, got a string (a JSON object encoded as a string?)`},
		{order(map[string]string{"payment_method": `"pm_\u0000"`}), `invalid message: data.payment_method: contains control character '\x00' at byte 3`},
	}
	for _, tt := range tests {
		_, err := Decode([]byte(tt.in), testTypes)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Decode(%.60q) error = %v, want prefix %q", tt.in, err, tt.want)
		}
	}
}

func TestDecodeAccepts(t *testing.T) {
	want := OrderPlaced{OrderID: 42, Amount: 1999, Currency: "usd", CustomerEmail: "ada@example.com", PaymentMethod: "pm_card_visa"}
	tests := []struct {
		name string
		in   string
		want OrderPlaced
	}{
		{"example", validMessage, want},
		{"compact", order(nil), want},
		{"upper-case currency is normalized", order(map[string]string{"currency": `"USD"`}), want},
		{"mixed-case currency is normalized", order(map[string]string{"currency": `"Usd"`}), want},
		{"pretty-printed", "{\n  \"data\": {\n    \"payment_method\": \"pm_card_visa\",\n    \"customer_email\": \"ada@example.com\",\n" +
			"    \"currency\": \"usd\",\n    \"amount\": 1999,\n    \"order_id\": 42\n  },\n  \"type\": \"order.placed\",\n  \"id\": \"evt_91c2\"\n}\n", want},
		{"CRLF and tabs", strings.ReplaceAll(validMessage, "\n", "\r\n\t"), want},
		{"escaped strings", order(map[string]string{"currency": `"\u0075sd"`, "payment_method": `"pm_card\u005fvisa"`}), want},
		{"limits", order(map[string]string{"order_id": "9007199254740991", "amount": "99999999", "currency": `"jpy"`,
			"customer_email": `"` + strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + `"`,
			"payment_method": `"pm_` + strings.Repeat("Z9_", 84) + `"`}),
			OrderPlaced{OrderID: 1<<53 - 1, Amount: 99999999, Currency: "jpy",
				CustomerEmail: strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57),
				PaymentMethod: "pm_" + strings.Repeat("Z9_", 84)}},
		{"smallest values", order(map[string]string{"order_id": "1", "amount": "1", "payment_method": `"pm_1"`, "customer_email": `"a+b.c@x-y.example.co.uk"`}),
			OrderPlaced{OrderID: 1, Amount: 1, Currency: "usd", CustomerEmail: "a+b.c@x-y.example.co.uk", PaymentMethod: "pm_1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.in), testTypes)
			if err != nil {
				t.Fatal(err)
			}
			if m.ID != "evt_91c2" || m.Type != TypeOrderPlaced || m.Consumer != ConsumerOrderPlaced {
				t.Errorf("got ID %q Type %q Consumer %q", m.ID, m.Type, m.Consumer)
			}
			if orderOf(m) == nil || *orderOf(m) != tt.want {
				t.Errorf("OrderPlaced = %+v, want %+v", orderOf(m), tt.want)
			}
			if string(m.Raw) != tt.in {
				t.Errorf("Raw = %q, want the input", m.Raw)
			}
			if !bytes.HasPrefix(m.Data, []byte("{")) || !bytes.HasSuffix(m.Data, []byte("}")) ||
				!strings.Contains(tt.in, string(m.Data)) {
				t.Errorf("Data = %q is not the data object of the input", m.Data)
			}
		})
	}
}

func TestDecodeData(t *testing.T) {
	m, err := Decode([]byte(validMessage), testTypes)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"order_id": 42, "amount": 1999, "currency": "usd",
          "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}`
	if string(m.Data) != want {
		t.Errorf("Data = %q, want %q", m.Data, want)
	}
}

func TestDecodeCopiesInput(t *testing.T) {
	in := []byte(order(map[string]string{"currency": `"USD"`}))
	m, err := Decode(in, testTypes)
	if err != nil {
		t.Fatal(err)
	}
	want := string(in)
	for i := range in {
		in[i] = 'x'
	}
	if string(m.Raw) != want {
		t.Errorf("Raw changed with the input: %q", m.Raw)
	}
	if !bytes.Contains(m.Data, []byte(`"USD"`)) {
		t.Errorf("Data = %q, want the currency as sent", m.Data)
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Field: "data.amount", Problem: "must be a positive integer, got -5", Code: CodeInvalid}
	if got, want := e.Error(), "invalid message: data.amount: must be a positive integer, got -5"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &Error{Problem: "message is empty", Code: CodeSyntax}
	if got, want := e.Error(), "invalid message: message is empty"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestValidateEmail(t *testing.T) {
	valid := []string{
		"ada@example.com",
		"Ada.Lovelace+receipts@mail.example.co.uk",
		"a_b-c!#$%&'*/=?^`{|}~@x1.io",
		"1@2.xn--p1ai",
	}
	for _, a := range valid {
		if err := ValidateEmail(a); err != nil {
			t.Errorf("ValidateEmail(%q) = %v", a, err)
		}
	}
	invalid := []string{
		"",
		"ada",
		"ada@",
		"@example.com",
		"ada@@example.com",
		"ada..l@example.com",
		"Ada <ada@example.com>",
		`"Ada" <ada@example.com>`,
		"<ada@example.com>",
		"ada@example.com (Ada)",
		" ada@example.com",
		"ada@example.com ",
		"ada@example.com, bob@example.com",
		"ada@example.com bob@example.com",
		"ada@example.com\n",
		"ada\x00@example.com",
		"ada\x7f@example.com",
		`"ada lovelace"@example.com`,
		"ada@localhost",
		"ada@[192.0.2.1]",
		"ada@-example.com",
		"ada@example-.com",
		"ada@example..com",
		"ada@example.123",
		"ada@exa_mple.com",
		"adä@example.com",
		"ada@exämple.com",
		strings.Repeat("a", 65) + "@example.com",
		"a@" + strings.Repeat("b", 64) + ".com",
		"a@" + strings.Repeat("b.", 126) + "com",
	}
	for _, a := range invalid {
		if err := ValidateEmail(a); err == nil {
			t.Errorf("ValidateEmail(%q) = nil, want an error", a)
		} else {
			t.Logf("%q: %v", a, err)
		}
	}
}

// TestErrorsDoNotEchoPersonalData checks that no error repeats a customer
// email or payment method: intake logs the error text of a quarantined
// message and stores it next to the message.
func TestErrorsDoNotEchoPersonalData(t *testing.T) {
	const name, local, domain = "Zelda Quux", "zelda.quux", "quux-secret.org"
	emails := []string{
		local,
		local + "@",
		"@" + domain,
		name + " <" + local + "@" + domain + ">",
		`"` + name + `" <` + local + "@" + domain + ">",
		"<" + local + "@" + domain + ">",
		local + "@" + domain + " (" + name + ")",
		" " + local + "@" + domain,
		local + "@" + domain + ", " + local + "2@" + domain,
		local + "@" + domain + " " + local + "2@" + domain,
		`"zelda quux"@` + domain,
		`zelda"quux@` + domain,
		"zelda..quux@" + domain,
		local + "@quux-secret",
		local + "@-" + domain,
		local + "@quux-secret-.org",
		local + "@quux_secret.org",
		local + "@quux-secret.123",
		local + "@[192.0.2.1]",
		local + "@" + domain + "\r\nBcc: quux@example.com",
		"zeldä.quux@" + domain,
		strings.Repeat("zelda", 13) + "@" + domain,
	}
	var inputs []string
	for _, e := range emails {
		q, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, order(map[string]string{"customer_email": string(q)}))
	}
	for _, pm := range []string{`"card_zelda_quux"`, `"pm_zelda-quux"`, `"pm_zelda_quux` + strings.Repeat("x", 255) + `"`, "\"pm_zelda\\u007fquux\"", `"pm_zelda quux"`} {
		inputs = append(inputs, order(map[string]string{"payment_method": pm}))
	}
	// A message, or its data, encoded twice: a string holding the fields.
	inner := `{\"customer_email\":\"` + local + "@" + domain + `\",\"payment_method\":\"pm_zelda_quux\"}`
	inputs = append(inputs, `"`+inner+`"`, envelope(`"evt_91c2"`, `"order.placed"`, `"`+inner+`"`))

	for _, in := range inputs {
		_, err := Decode([]byte(in), testTypes)
		if err == nil {
			t.Errorf("Decode(%q) succeeded", in)
			continue
		}
		msg := strings.ToLower(err.Error())
		if strings.Contains(msg, "zelda") || strings.Contains(msg, "quux") {
			t.Errorf("Decode(%q) error repeats the value: %v", in, err)
		}
	}
}
