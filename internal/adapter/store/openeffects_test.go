package store

import (
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/leaf/identity"
)

// TestOpenEffectsRowIsCounted: every row OpenEffectsRow names is a row of
// the guard's query, so a route whose effects it lists is really counted.
func TestOpenEffectsRowIsCounted(t *testing.T) {
	for _, e := range []identity.Effect{identity.EffectPayment, identity.EffectPaymentIntent,
		identity.EffectEmail, identity.EffectRefundEmail, identity.EffectOrderEmail, identity.EffectRefund} {
		row, ok := OpenEffectsRow(e)
		if !ok {
			t.Errorf("effect %q is not counted by the key-namespace guard", e)
			continue
		}
		if !strings.Contains(openEffectsSQL, "SELECT '"+row+"'") {
			t.Errorf("effect %q: row %q is not in openEffectsSQL", e, row)
		}
	}
}
