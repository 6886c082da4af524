package intake

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestIntakeCountsItsDecisions records a new message, a copy, a copy with
// another payload, an undecodable message and a message past its last
// delivery, and reads each decision back from the registry: one count per
// decision, under the message's consumer, with no message ID in a label.
func TestIntakeCountsItsDecisions(t *testing.T) {
	ctx := context.Background()
	st := store.New(storetest.NewPool(t))
	// Recording never reaches Temporal; the client is never dialled.
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	reg := prometheus.NewRegistry()
	in, err := New(st, tc, Config{Logger: slog.New(slog.DiscardHandler), Metrics: metrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(amount int) []byte {
		return []byte(`{"id":"evt_m1","type":"order.placed","data":{"order_id":9,"amount":` + strings.Repeat("9", amount) +
			`,"currency":"usd","customer_email":"m@example.com","payment_method":"pm_card_visa"}}`)
	}
	for _, raw := range [][]byte{msg(3), msg(3), msg(4), []byte(`{"id":"evt_m2","type":"order.placed"`)} {
		if _, err := in.Record(ctx, raw, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.reject(ctx, []byte("gone"), "jetstream", "", "", store.ReasonMaxDeliver, errors.New("postgres down")); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP effectively_intake_decisions_total Messages by the intake's decision: started, duplicate, business_duplicate, payload_mismatch, invalid, max_deliver.
# TYPE effectively_intake_decisions_total counter
effectively_intake_decisions_total{consumer="order-placed",decision="duplicate"} 1
effectively_intake_decisions_total{consumer="order-placed",decision="payload_mismatch"} 1
effectively_intake_decisions_total{consumer="unknown",decision="invalid"} 1
effectively_intake_decisions_total{consumer="unknown",decision="max_deliver"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.NameIntakeDecisions); err != nil {
		t.Fatal(err)
	}
}
