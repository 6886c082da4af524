package message

import (
	"errors"
	"testing"
)

func refund(data string) string {
	return `{"id":"evt_r1","type":"order.refund_requested","data":` + data + `}`
}

func TestDecodeRefundRequested(t *testing.T) {
	m, err := Decode([]byte(refund(`{"order_id":42,"amount":500,"reason":"requested_by_customer"}`)), testTypes)
	if err != nil {
		t.Fatal(err)
	}
	want := RefundRequested{OrderID: 42, Amount: 500, Reason: "requested_by_customer"}
	if r, ok := m.Value.(*RefundRequested); !ok || *r != want {
		t.Errorf("Value = %#v, want %+v", m.Value, want)
	}
	if m.Type != TypeRefundRequested || m.Consumer != ConsumerRefundRequested {
		t.Errorf("type %q consumer %q", m.Type, m.Consumer)
	}
}

func TestDecodeRefundRequestedRejects(t *testing.T) {
	tests := []struct {
		name, data, code, field string
	}{
		{"unknown field", `{"order_id":42,"amount":500,"reason":"duplicate","currency":"usd"}`, CodeUnknownField, "data.currency"},
		{"order_id missing", `{"amount":500,"reason":"duplicate"}`, CodeMissing, "data.order_id"},
		{"order_id string", `{"order_id":"42","amount":500,"reason":"duplicate"}`, CodeType, "data.order_id"},
		{"amount zero", `{"order_id":42,"amount":0,"reason":"duplicate"}`, CodeInvalid, "data.amount"},
		{"amount negative", `{"order_id":42,"amount":-5,"reason":"duplicate"}`, CodeInvalid, "data.amount"},
		{"amount fraction", `{"order_id":42,"amount":5.5,"reason":"duplicate"}`, CodeType, "data.amount"},
		{"amount too large", `{"order_id":42,"amount":100000000,"reason":"duplicate"}`, CodeInvalid, "data.amount"},
		{"reason missing", `{"order_id":42,"amount":500}`, CodeMissing, "data.reason"},
		{"reason null", `{"order_id":42,"amount":500,"reason":null}`, CodeMissing, "data.reason"},
		{"reason free text", `{"order_id":42,"amount":500,"reason":"changed my mind"}`, CodeInvalid, "data.reason"},
		{"reason other case", `{"order_id":42,"amount":500,"reason":"Duplicate"}`, CodeInvalid, "data.reason"},
		{"reason number", `{"order_id":42,"amount":500,"reason":1}`, CodeType, "data.reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(refund(tt.data)), testTypes)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode error = %v, want an *Error", err)
			}
			if e.Code != tt.code || e.Field != tt.field {
				t.Errorf("error %q: code %q field %q, want %q %q", e, e.Code, e.Field, tt.code, tt.field)
			}
		})
	}
}

// TestDecodeUnknownTypeNamesKnownTypes checks that an unknown type's error
// lists the types the Types know, so a producer sees what to send.
func TestDecodeUnknownTypeNamesKnownTypes(t *testing.T) {
	_, err := Decode([]byte(`{"id":"evt_1","type":"order.cancelled","data":{}}`), testTypes)
	const want = "invalid message: type: unknown type \"order.cancelled\"; known types are order.placed, order.refund_requested"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}
