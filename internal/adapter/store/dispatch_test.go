package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestDispatchClaimsEachConsumersShare: a claim takes up to each
// consumer's own limit of its oldest pending rows, so that one consumer's
// backlog, older than another's rows, does not fill the other's share; a
// second dispatcher meanwhile gets none of the claimed rows; the batch
// comes oldest first.
func TestDispatchClaimsEachConsumersShare(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	insert := func(consumer, id string) {
		t.Helper()
		if _, err := s.InsertInbox(ctx, store.InboxEntry{Consumer: consumer, MessageID: id, Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		insert("order-placed", fmt.Sprintf("evt_share%02d", i))
	}
	insert("order-refund", "evt_share_r0")
	insert("order-refund", "evt_share_r1")
	o := store.DispatchOptions{Consumers: []string{"order-placed", "order-refund"}, Limits: []int{5, 1}, Lease: time.Minute, Hold: time.Hour}
	var first []store.PendingMessage
	_, err := s.DispatchPending(ctx, o, func(ctx context.Context, batch []store.PendingMessage) []store.Dispatched {
		first = batch
		// A second dispatcher meanwhile claims only what this one left.
		_, err := s.DispatchPending(ctx, o, func(_ context.Context, again []store.PendingMessage) []store.Dispatched {
			for _, p := range again {
				for _, f := range batch {
					if p.MessageID == f.MessageID {
						t.Errorf("%s claimed by two dispatchers at once", p.MessageID)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		var done []store.Dispatched
		for _, p := range batch {
			done = append(done, store.Dispatched{Consumer: p.Consumer, MessageID: p.MessageID, WorkflowID: p.Consumer + "/" + p.MessageID})
		}
		return done
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range first {
		got = append(got, p.MessageID)
	}
	want := []string{"evt_share00", "evt_share01", "evt_share02", "evt_share03", "evt_share04", "evt_share_r0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v: each consumer's oldest, up to its own limit, oldest first", got, want)
	}
	if pending, _, err := s.InboxCounts(ctx); err != nil || pending != 22-6 {
		t.Fatalf("pending after the claim = %d, %v; want 16", pending, err)
	}
	if _, err := s.DispatchPending(ctx, store.DispatchOptions{Consumers: []string{"order-placed"}, Limits: []int{1, 2}}, nil); err == nil {
		t.Fatal("two limits for one consumer: no error")
	}
}
