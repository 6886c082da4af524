package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/store"
)

// DefaultPruneBatch is how many rows one DELETE removes when PruneInput
// does not say.
const DefaultPruneBatch = 1000

// PrunePolicy is what Prune deletes by. The worker builds it from the
// retention it checked against the redelivery horizon at start
// (internal/intake/retention); Prune checks it again.
type PrunePolicy struct {
	// Keep is how long processed, inbox and outbox rows are kept.
	Keep time.Duration
	// Quarantine is how long a quarantine row is kept after its last copy;
	// 0 keeps quarantine rows for good.
	Quarantine time.Duration
	// Horizon is the shortest safe retention.
	Horizon time.Duration
}

// check refuses a policy that would prune a record a copy may still need.
func (p PrunePolicy) check() error {
	switch {
	case p.Keep <= 0:
		return fmt.Errorf("retention %s must be positive", p.Keep)
	case p.Keep < p.Horizon:
		return fmt.Errorf("retention %s is shorter than the safe horizon %s", p.Keep, p.Horizon)
	case p.Quarantine < 0 || (p.Quarantine > 0 && p.Quarantine < p.Horizon):
		return fmt.Errorf("quarantine retention %s is shorter than the safe horizon %s", p.Quarantine, p.Horizon)
	}
	return nil
}

// PruneInput is the input of Prune.
type PruneInput struct {
	// BatchSize bounds the rows one DELETE statement removes. Default
	// DefaultPruneBatch.
	BatchSize int `json:"batch_size,omitempty"`
}

// PruneResult reports how many rows Prune deleted per table.
type PruneResult struct {
	// Retention is the retention the rows were pruned with.
	Retention string `json:"retention"`
	// Quarantine is the quarantine retention the quarantine rows were
	// pruned with; empty when they are kept for good.
	Quarantine string `json:"quarantine,omitempty"`
	// Deleted maps a table name to the rows deleted from it.
	Deleted map[string]int64 `json:"deleted"`
}

// PruneName is Prune's activity type name.
const PruneName = "Prune"

func init() { register(PruneName, func(a *Activities) any { return a.Prune }) }

// Prune deletes the processed-message rows, dispatched inbox rows and
// published outbox rows older than the worker's retention, then the
// quarantine rows whose last copy is older than the quarantine retention
// (Retention.Quarantine; none when it is 0), in batches, and heartbeats
// after each batch. A pending inbox row or an unpublished outbox event is
// never deleted.
//
// The retention comes from the worker (Activities.Retention), which checked
// it against the redelivery horizon at start; Prune checks it again and
// refuses to run with an unsafe one. Safe to retry: a repeat deletes what
// the first run left, by the same rule.
func (a *Activities) Prune(ctx context.Context, in PruneInput) (PruneResult, error) {
	if err := a.Retention.check(); err != nil {
		return PruneResult{}, temporal.NewNonRetryableApplicationError("refusing to prune", ErrTypeRetentionUnsafe, err)
	}
	batch := in.BatchSize
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	res := PruneResult{Retention: a.Retention.Keep.String(), Deleted: map[string]int64{}}
	// Resume where a previous attempt stopped, per its last heartbeat.
	if activity.HasHeartbeatDetails(ctx) {
		var prev PruneResult
		if err := activity.GetHeartbeatDetails(ctx, &prev); err == nil && prev.Deleted != nil {
			res.Deleted = prev.Deleted
		}
	}
	logger := activity.GetLogger(ctx)
	type target struct {
		table string
		age   time.Duration
	}
	targets := make([]target, 0, len(store.PruneTables)+1)
	for _, table := range store.PruneTables {
		targets = append(targets, target{table, a.Retention.Keep})
	}
	if a.Retention.Quarantine > 0 {
		res.Quarantine = a.Retention.Quarantine.String()
		targets = append(targets, target{store.PruneQuarantine, a.Retention.Quarantine})
	}
	for _, tg := range targets {
		table := tg.table
		for {
			n, err := a.Store.Prune(ctx, table, tg.age, batch)
			if err != nil {
				return res, fmt.Errorf("prune: %w", err)
			}
			res.Deleted[table] += n
			activity.RecordHeartbeat(ctx, res)
			if n < int64(batch) {
				break
			}
		}
	}
	logger.Info("pruned records", "retention", res.Retention, "deleted", res.Deleted)
	return res, nil
}
