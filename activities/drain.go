package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/effect"
)

// DefaultEffectTimeout bounds an effect that runs outside any activity
// deadline (a test calling an activity method directly).
const DefaultEffectTimeout = effect.DefaultTimeout

// Drainer lets a worker shutdown wait for the effects in flight (see
// effect.Drainer).
type Drainer = effect.Drainer

// beginEffect starts one effect under the protocol (effect.Begin): a
// context a drain does not cancel, heartbeats, and a retryable
// ErrTypeDraining when the worker is shutting down.
func (a *Activities) beginEffect(ctx context.Context) (effectCtx context.Context, end func(), err error) {
	ectx, end, err := effect.Begin(ctx, a.Drain)
	if errors.Is(err, effect.ErrDraining) {
		return nil, nil, temporal.NewApplicationError(err.Error(), ErrTypeDraining)
	}
	return ectx, end, err
}
