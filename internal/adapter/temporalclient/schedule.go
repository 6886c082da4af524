package temporalclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// EnsureSchedule creates the schedule id, or updates an existing one to
// spec and action, so that every worker start leaves exactly one schedule
// with the current settings. Runs never overlap: a run still going when the
// next is due makes the schedule skip that one.
//
// Several workers starting at once race here: one creates, the others
// update, and concurrent updates can be refused on a conflict token. Each
// try re-reads the schedule, so a few tries settle it.
func EnsureSchedule(ctx context.Context, c client.Client, id string, spec client.ScheduleSpec, action *client.ScheduleWorkflowAction) (client.ScheduleHandle, error) {
	sc := c.ScheduleClient()
	var err error
	for try := range 5 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
		}
		var h client.ScheduleHandle
		h, err = sc.Create(ctx, client.ScheduleOptions{
			ID: id, Spec: spec, Action: action,
			Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Note: "created by the effectively worker",
		})
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
			err = fmt.Errorf("create schedule %s: %w", id, err)
			continue
		}
		h = sc.GetHandle(ctx, id)
		err = h.Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				s := in.Description.Schedule
				s.Spec, s.Action = &spec, action
				if s.Policy == nil {
					s.Policy = &client.SchedulePolicies{}
				}
				s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
				return &client.ScheduleUpdate{Schedule: &s}, nil
			},
		})
		if err == nil {
			return h, nil
		}
		err = fmt.Errorf("update schedule %s: %w", id, err)
	}
	return nil, err
}
