package activities_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
)

// TestEffectOutcomesAreCounted: a charge, its retry (answered from the
// record), a declined card, a second message for a held order, and a
// receipt with its retry, each counted under its outcome.
func TestEffectOutcomesAreCounted(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	reg := prometheus.NewRegistry()
	f.acts.Metrics = metrics.New(reg)
	for _, in := range []struct {
		id, pm string
		order  int64
	}{{"evt_o1", "pm_card_visa", 81}, {"evt_o1", "pm_card_visa", 81}, {"evt_o2", "pm_card_chargeDeclined", 82}, {"evt_o3", "pm_card_visa", 81}} {
		if _, err := run(t, f, f.acts.ChargeOrder, charge(in.id, in.order, in.pm)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := run(t, f, f.acts.SendReceipt, receipt("evt_o1", 81)); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP effectively_effect_outcomes_total Effect attempts by outcome: payment paid, declined, replayed, reconciled, unknown, fenced, processing, unexpected; receipt and refund_receipt sent, replayed, failed, unknown; refund refunded, failed, replayed, reconciled; provider_auth for any.
# TYPE effectively_effect_outcomes_total counter
effectively_effect_outcomes_total{effect="payment",result="declined"} 1
effectively_effect_outcomes_total{effect="payment",result="paid"} 1
effectively_effect_outcomes_total{effect="payment",result="replayed"} 1
effectively_effect_outcomes_total{effect="receipt",result="replayed"} 1
effectively_effect_outcomes_total{effect="receipt",result="sent"} 1
# HELP effectively_intake_decisions_total Messages by the intake's decision: started, duplicate, business_duplicate, payload_mismatch, invalid, max_deliver.
# TYPE effectively_intake_decisions_total counter
effectively_intake_decisions_total{consumer="order-placed",decision="business_duplicate"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.NameEffectOutcomes, metrics.NameIntakeDecisions); err != nil {
		t.Fatal(err)
	}
}
