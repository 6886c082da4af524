package activities_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestPruneDeletesOldQuarantineRows: the pruning run deletes quarantine
// rows whose last copy is older than the quarantine retention and keeps the
// recent ones (a row first received long ago whose message came again
// lately included); with no quarantine retention it keeps them all.
func TestPruneDeletesOldQuarantineRows(t *testing.T) {
	ctx := context.Background()
	db := store.New(storetest.NewPool(t))
	rows := map[string]struct{ received, lastSeen time.Duration }{
		"old":          {40 * 24 * time.Hour, 40 * 24 * time.Hour},
		"older":        {90 * 24 * time.Hour, 35 * 24 * time.Hour},
		"recent":       {time.Hour, time.Hour},
		"seen-lately":  {40 * 24 * time.Hour, 2 * 24 * time.Hour},
		"just-younger": {29 * 24 * time.Hour, 29 * 24 * time.Hour},
	}
	for name, r := range rows {
		id, err := db.Quarantine(ctx, store.QuarantineEntry{Source: "test", Raw: []byte(name), Reason: store.ReasonInvalid, Detail: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool().Exec(ctx, `UPDATE quarantine SET received_at = now() - make_interval(secs => $2), last_seen_at = now() - make_interval(secs => $3) WHERE id = $1`,
			id, r.received.Seconds(), r.lastSeen.Seconds()); err != nil {
			t.Fatal(err)
		}
	}
	left := func() map[string]bool {
		out := map[string]bool{}
		rs, err := db.QuarantineList(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range rs {
			out[string(q.Raw)] = true
		}
		return out
	}
	prune := func(p activities.PrunePolicy) activities.PruneResult {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivity(&activities.Activities{Store: db, Retention: p})
		val, err := env.ExecuteActivity((&activities.Activities{}).Prune, activities.PruneInput{BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.PruneResult
		if err := val.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	h := 25 * time.Hour
	// No quarantine retention: nothing in the quarantine is touched.
	if res := prune(activities.PrunePolicy{Keep: 30 * 24 * time.Hour, Horizon: h}); res.Deleted[store.PruneQuarantine] != 0 || len(left()) != len(rows) {
		t.Fatalf("without a quarantine retention: deleted %v, %d rows left of %d", res.Deleted, len(left()), len(rows))
	}
	res := prune(activities.PrunePolicy{Keep: 30 * 24 * time.Hour, Quarantine: 30 * 24 * time.Hour, Horizon: h})
	if res.Deleted[store.PruneQuarantine] != 2 || res.Quarantine != (30*24*time.Hour).String() {
		t.Errorf("result %+v, want 2 quarantine rows deleted with the quarantine retention", res)
	}
	got := left()
	for name, want := range map[string]bool{"old": false, "older": false, "recent": true, "seen-lately": true, "just-younger": true} {
		if got[name] != want {
			t.Errorf("row %s kept = %v, want %v", name, got[name], want)
		}
	}
}
