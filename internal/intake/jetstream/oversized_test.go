package jetstream_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/testenv"
)

// oversizedMsg is a message over message.MaxSize whose bytes differ with id.
func oversizedMsg(id string) string {
	return `{"id":"` + id + `","type":"order.placed","data":{"pad":"` + strings.Repeat(id, message.MaxSize/len(id)) + `"}}`
}

// quarantineRow is what an operator sees of one quarantine row.
type quarantineRow struct {
	Reason, SHA256 string
	Size           int64
	Raw            []byte
	Copies         int
}

func (h *harness) quarantineRows(tb testing.TB) map[string]quarantineRow {
	tb.Helper()
	rows, err := h.db.Query(context.Background(), `SELECT reason, raw_sha256, size, raw, copies FROM quarantine`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]quarantineRow{}
	for rows.Next() {
		var r quarantineRow
		if err := rows.Scan(&r.Reason, &r.SHA256, &r.Size, &r.Raw, &r.Copies); err != nil {
			tb.Fatal(err)
		}
		out[r.SHA256] = r
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// checkOversizedRows asserts one too_large row per distinct message of msgs,
// each with its size, the SHA-256 of the whole, a bounded prefix and the
// number of copies received.
func (h *harness) checkOversizedRows(tb testing.TB, msgs []string) {
	tb.Helper()
	copies := map[string]int{}
	for _, m := range msgs {
		copies[m]++
	}
	got := h.quarantineRows(tb)
	if len(got) != len(copies) {
		tb.Errorf("%d quarantine rows, want %d (one per distinct oversized message): %+v", len(got), len(copies), got)
	}
	for m, n := range copies {
		sum := sha256.Sum256([]byte(m))
		r, ok := got[hex.EncodeToString(sum[:])]
		if !ok {
			tb.Errorf("no quarantine row with the SHA-256 of the %d-byte message %.20q…", len(m), m)
			continue
		}
		if r.Reason != store.ReasonTooLarge || r.Size != int64(len(m)) || r.Copies != n {
			tb.Errorf("row: reason %s, size %d, copies %d; want %s, %d, %d", r.Reason, r.Size, r.Copies, store.ReasonTooLarge, len(m), n)
		}
		if string(r.Raw) != m[:message.OversizedPrefix] {
			tb.Errorf("row keeps %d bytes %.20q…, want the first %d bytes of the message", len(r.Raw), r.Raw, message.OversizedPrefix)
		}
	}
}

// TestConsumerQuarantinesOversizedMessages publishes oversized messages to
// a stream without a message size limit of its own, as an operator's may be
// (the broker takes up to 1 MB): the consumer quarantines each as too_large
// without keeping the whole, acks it, and starts nothing.
func TestConsumerQuarantinesOversizedMessages(t *testing.T) {
	h := newHarness(t, nil)
	h.j = testenv.NewJetStream(t, testenv.JetStreamOptions{MaxMsgSize: -1})
	msgs := []string{oversizedMsg("evt_big_a"), oversizedMsg("evt_big_b"), oversizedMsg("evt_big_a")}
	for _, m := range msgs {
		h.j.Publish(t, []byte(m), "")
	}
	cfg := h.j.ConsumerConfig(t, 30*time.Second, 5)
	cons, err := jetstream.NewConsumer(context.Background(), h.in, h.j.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, cons)
	testenv.Eventually(t, 30*time.Second, "every oversized message quarantined and acked", func() bool {
		ackPending, pending, _ := h.consumerInfo(t, cfg.Durable)
		return h.count(t, `SELECT coalesce(sum(copies), 0) FROM quarantine`) == int64(len(msgs)) && ackPending == 0 && pending == 0
	})
	stop()
	h.checkOversizedRows(t, msgs)
	if n := len(h.tc.Starts()); n != 0 {
		t.Errorf("%d workflows started for oversized messages", n)
	}
}
