package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// defaultEventPoll is how often the grace wait reads the event table.
const defaultEventPoll = 250 * time.Millisecond

// awaitEarlierSend is the mail's lookup in the effect protocol: it waits up
// to ResendGrace for a SendGrid event (processed, or any later one) proving
// that an earlier attempt's send of key was accepted, heartbeating while it
// waits. It returns the X-Message-Id the event names and true when one
// arrives. With no ResendGrace it reads the event table once. A local
// attempt does not wait: it returns a retryable ErrTypeAwaitingEmailEvent so
// that the regular activity, which heartbeats, waits instead.
func (a *Activities) awaitEarlierSend(ctx context.Context, key string, orderID int64) (string, bool, error) {
	if a.ResendGrace > 0 && activity.IsActivity(ctx) && activity.GetInfo(ctx).IsLocalActivity {
		if x, ok, err := a.Store.EmailAccepted(ctx, key); err != nil || ok {
			return x, ok, err
		}
		return "", false, temporal.NewApplicationError(
			fmt.Sprintf("an earlier attempt may have sent the receipt of order %d: the regular activity waits for SendGrid's event", orderID),
			ErrTypeAwaitingEmailEvent)
	}
	poll := a.EventPoll
	if poll <= 0 {
		poll = defaultEventPoll
	}
	deadline := time.Now().Add(a.ResendGrace)
	for {
		x, ok, err := a.Store.EmailAccepted(ctx, key)
		if err != nil || ok {
			return x, ok, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", false, nil
		}
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, "awaiting sendgrid event for "+key)
		}
		t := time.NewTimer(min(poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", false, ctx.Err()
		case <-t.C:
		}
	}
}
