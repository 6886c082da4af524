package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/testenv"
)

// TestSendQuarantinesOversizedLines is the bug of issue 13 as a user met
// it: `starter send` of a file with lines over the size limit. Each is
// reported and quarantined as too_large with its size, the SHA-256 of the
// whole and a bounded prefix; two different ones are two rows, a copy
// counts on its row; the valid line still starts its workflow.
func TestSendQuarantinesOversizedLines(t *testing.T) {
	s := testenv.NewStack(t, testenv.StackOptions{})
	t.Setenv("DATABASE_URL", s.DBURL)
	t.Setenv("TEMPORAL_ADDRESS", s.Temporal.FrontendHostPort())
	t.Setenv("TEMPORAL_NAMESPACE", "default")
	t.Setenv("EFFECTIVELY_TASK_QUEUE", s.TaskQueue)
	t.Setenv("NATS_URL", "off")

	big := func(id string) string {
		return `{"id":"` + id + `","type":"order.placed","data":{"pad":"` + strings.Repeat(id, message.MaxSize/len(id)) + `"}}`
	}
	a, b := big("evt_big_a"), big("evt_big_b")
	valid := `{"id": "evt_ok", "type": "order.placed", "data": {"order_id": 9, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	file := filepath.Join(t.TempDir(), "orders.jsonl")
	if err := os.WriteFile(file, []byte(a+"\n"+valid+"\n"+b+"\n"+a+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"send", file}, nil, &stdout, &stderr); code != exitInvalid {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitInvalid, stderr.String())
	}
	var results []intake.Result
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var r intake.Result
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if len(results) != 4 || results[1].Status != intake.StatusStarted {
		t.Fatalf("results %+v", results)
	}
	for _, i := range []int{0, 2, 3} {
		r := results[i]
		if r.Status != intake.StatusInvalid || r.Reason != store.ReasonTooLarge || !strings.Contains(r.Error, "the limit is 65536") {
			t.Errorf("line %d: %+v, want invalid, too_large, with the size", i+1, r)
		}
	}
	if results[0].QuarantineID != results[3].QuarantineID || results[0].QuarantineID == results[2].QuarantineID {
		t.Errorf("quarantine IDs %d, %d, %d: want the copy on the first row and the other message on its own",
			results[0].QuarantineID, results[2].QuarantineID, results[3].QuarantineID)
	}
	entries, err := s.Store.QuarantineList(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d quarantine rows, want 2", len(entries))
	}
	for _, e := range entries {
		want, copies := a, 2
		if e.ID == results[2].QuarantineID {
			want, copies = b, 1
		}
		if e.Size != int64(len(want)) || e.Copies != copies || !e.Truncated() || string(e.Raw) != want[:message.OversizedPrefix] {
			t.Errorf("row %d: size %d, copies %d, %d bytes kept; want %d, %d, the first %d", e.ID, e.Size, e.Copies, len(e.Raw), len(want), copies, message.OversizedPrefix)
		}
	}
}
