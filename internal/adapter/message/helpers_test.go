package message

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
)

// orderFields are the fields of a valid order.placed data object, as raw
// JSON values, in the order they are written.
var orderFields = [][2]string{
	{"order_id", `42`},
	{"amount", `1999`},
	{"currency", `"usd"`},
	{"customer_email", `"ada@example.com"`},
	{"payment_method", `"pm_card_visa"`},
}

// dataWith returns a valid order.placed data object with edits applied: a
// key maps to its raw JSON value, or to "-" to leave the field out. Keys that
// are not order fields are added at the end, in sorted order.
func dataWith(edits map[string]string) string {
	var parts []string
	for _, f := range orderFields {
		v := f[1]
		if e, ok := edits[f[0]]; ok {
			v = e
		}
		if v != "-" {
			parts = append(parts, `"`+f[0]+`":`+v)
		}
	}
	var extra []string
	for k := range edits {
		if !contains(orderPlacedFields, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		parts = append(parts, `"`+k+`":`+edits[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// envelope returns a message with the given raw JSON values for id, type and
// data; "-" leaves a field out.
func envelope(id, typ, data string) string {
	var parts []string
	for _, f := range [][2]string{{"id", id}, {"type", typ}, {"data", data}} {
		if f[1] != "-" {
			parts = append(parts, `"`+f[0]+`":`+f[1])
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// order returns a valid order.placed message with data edits applied.
func order(edits map[string]string) string {
	return envelope(`"evt_91c2"`, `"order.placed"`, dataWith(edits))
}

// validMessage is the example message from the package documentation.
const validMessage = `{"id": "evt_91c2", "type": "order.placed",
 "data": {"order_id": 42, "amount": 1999, "currency": "usd",
          "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// testTypes are the message types of this package, routed as the product
// routes them (internal/intake/route cannot be imported here: it imports message).
var testTypes = typeTable{
	TypeOrderPlaced:     {ConsumerOrderPlaced, OrderPlacedSchema},
	TypeRefundRequested: {ConsumerRefundRequested, RefundRequestedSchema},
}

type typeTable map[string]struct {
	consumer string
	schema   Schema
}

func (t typeTable) Lookup(typ string) (string, Schema, bool) {
	r, ok := t[typ]
	return r.consumer, r.schema, ok
}

func (t typeTable) Names() []string {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// orderOf is the order.placed data of m, or nil.
func orderOf(m *Message) *OrderPlaced {
	o, _ := m.Value.(*OrderPlaced)
	return o
}

// orderPlacedOnly routes order.placed alone, for the fuzz test's round trip.
var orderPlacedOnly = typeTable{TypeOrderPlaced: testTypes[TypeOrderPlaced]}
