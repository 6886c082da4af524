package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestStatusFindsTheConsumer: `starter status ID` names no message type;
// it finds the route whose consumer has a record of the message.
func TestStatusFindsTheConsumer(t *testing.T) {
	url := storetest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1") // Temporal's absence is reported, not fatal
	ctx := context.Background()
	st, err := store.Open(ctx, url, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	raw := []byte(`{"id":"evt_s1","type":"order.refund_requested","data":{"order_id":1,"amount":1,"reason":"duplicate"}}`)
	if _, err := store.New(st).InsertInbox(ctx, store.InboxEntry{Consumer: "order-refund", MessageID: "evt_s1", Payload: raw, PayloadHash: "h", Source: "test"}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"status", "evt_s1"}, nil, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	var rep statusReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Consumer != "order-refund" || rep.Inbox == nil || rep.Workflow == nil || rep.Workflow.ID != "order-refund/evt_s1" {
		t.Errorf("status = consumer %q inbox %v workflow %+v", rep.Consumer, rep.Inbox, rep.Workflow)
	}
	if code := run(ctx, []string{"status", "evt_nothing"}, nil, &stdout, &stderr); code != exitNotFound {
		t.Errorf("status of an unknown message: exit %d, want %d", code, exitNotFound)
	}
}
