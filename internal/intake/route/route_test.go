package route_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/workflows"
)

func TestDefaultRoutes(t *testing.T) {
	reg := route.Default()
	tests := []struct {
		raw          string
		consumer     string
		workflowID   string
		workflowType string
		summary      string
	}{
		{
			`{"id":"evt_91c2","type":"order.placed","data":{"order_id":42,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`,
			"order-placed", "order-placed/evt_91c2", "OrderPlaced", "Order 42 from message evt_91c2",
		},
		{
			`{"id":"evt_r1","type":"order.refund_requested","data":{"order_id":42,"amount":500,"reason":"requested_by_customer"}}`,
			"order-refund", "order-refund/evt_r1", "OrderRefund", "Refund of order 42 from message evt_r1",
		},
	}
	for _, tt := range tests {
		m, err := reg.Decode([]byte(tt.raw))
		if err != nil {
			t.Fatal(err)
		}
		if m.Consumer != tt.consumer {
			t.Errorf("consumer = %q, want %q", m.Consumer, tt.consumer)
		}
		ws, err := reg.Start(m)
		if err != nil {
			t.Fatal(err)
		}
		if ws.ID != tt.workflowID || ws.Workflow != tt.workflowType || ws.Summary != tt.summary {
			t.Errorf("start = %+v", ws)
		}
		if v, ok := ws.SearchAttributes.GetInt64(workflows.OrderIDKey); !ok || v != 42 {
			t.Errorf("OrderId = %d, %v", v, ok)
		}
		if v, ok := ws.SearchAttributes.GetKeyword(workflows.ConsumerKey); !ok || v != tt.consumer {
			t.Errorf("Consumer = %q, %v", v, ok)
		}
		if strings.Contains(ws.Summary+ws.Details, "ada@") {
			t.Errorf("summary carries the address: %q", ws.Summary+ws.Details)
		}
	}
}

func TestStartInputs(t *testing.T) {
	reg := route.Default()
	m, err := reg.Decode([]byte(`{"id":"evt_r1","type":"order.refund_requested","data":{"order_id":42,"amount":500,"reason":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := reg.Start(m)
	if err != nil {
		t.Fatal(err)
	}
	want := workflows.OrderRefundInput{Consumer: "order-refund", MessageID: "evt_r1",
		Refund: message.RefundRequested{OrderID: 42, Amount: 500, Reason: "duplicate"}}
	if ws.Input != want {
		t.Errorf("input = %#v, want %#v", ws.Input, want)
	}
}

func TestNewRefusesBadRoutes(t *testing.T) {
	ok := route.OrderPlaced()
	tests := map[string][]route.Route{
		"same type twice":        {ok, ok},
		"same consumer twice":    {ok, func() route.Route { r := route.RefundRequested(); r.Consumer = ok.Consumer; return r }()},
		"bad consumer":           {func() route.Route { r := ok; r.Consumer = "Order/Placed"; return r }()},
		"schema of another type": {func() route.Route { r := ok; r.Schema = message.RefundRequestedSchema; return r }()},
		"no workflow":            {func() route.Route { r := ok; r.Workflow = ""; return r }()},
		"no input": {route.For(route.Spec[message.OrderPlaced]{Type: ok.Type, Consumer: ok.Consumer, Schema: ok.Schema, Workflow: ok.Workflow, Effects: ok.Effects,
			SearchAttributes: func(m *message.Message, o *message.OrderPlaced) temporal.SearchAttributes {
				return workflows.SearchAttributes(m.Consumer, m.ID, o.OrderID)
			}})},
		"no search attributes": {route.For(route.Spec[message.OrderPlaced]{Type: ok.Type, Consumer: ok.Consumer, Schema: ok.Schema, Workflow: ok.Workflow, Effects: ok.Effects,
			Input: func(*message.Message, *message.OrderPlaced) any { return nil }})},
		"not built with For": {{Type: ok.Type, Consumer: ok.Consumer, Schema: ok.Schema, Workflow: ok.Workflow, Effects: ok.Effects}},
		"no effects":         {func() route.Route { r := ok; r.Effects = nil; return r }()},
	}
	for name, routes := range tests {
		if _, err := route.New(routes...); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := route.New(route.OrderPlaced(), route.RefundRequested()); err != nil {
		t.Errorf("the default routes: %v", err)
	}
}

func TestStartRefusesForeignMessage(t *testing.T) {
	only, err := route.New(route.OrderPlaced())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := only.Decode([]byte(`{"id":"evt_r1","type":"order.refund_requested","data":{"order_id":42,"amount":500,"reason":"duplicate"}}`)); err == nil {
		t.Error("a registry without the refund route decoded a refund")
	}
	m, err := route.Default().Decode([]byte(`{"id":"evt_r1","type":"order.refund_requested","data":{"order_id":42,"amount":500,"reason":"duplicate"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := only.Start(m); err == nil {
		t.Error("Start accepted a message of a type it does not route")
	}
}

// TestIntakeAndStarterNameNoMessageType guards the point of the registry:
// the intake, the dispatcher and the starter look types up here, so their
// code names no type, consumer or workflow of any route (comments aside).
func TestIntakeAndStarterNameNoMessageType(t *testing.T) {
	var names []string
	for _, r := range route.Default().Routes() {
		names = append(names, strconv.Quote(r.Type), strconv.Quote(r.Consumer), strconv.Quote(r.Workflow))
	}
	names = append(names, "TypeOrderPlaced", "ConsumerOrderPlaced", "TypeRefundRequested", "ConsumerRefundRequested",
		"OrderPlacedName", "OrderRefundName", "OrderPlacedInput", "OrderRefundInput")
	for _, dir := range []string{"..", "../../../starter"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(src), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				for _, n := range names {
					if strings.Contains(line, n) {
						t.Errorf("%s:%d names %s: look it up in the route registry instead", f, i+1, n)
					}
				}
			}
		}
	}
}
