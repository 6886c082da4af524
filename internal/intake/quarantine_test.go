package intake_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// oversizedMsg is a message over message.MaxSize whose bytes differ with id.
func oversizedMsg(id string) string {
	return `{"id":"` + id + `","type":"order.placed","data":{"pad":"` + strings.Repeat(id, message.MaxSize/len(id)) + `"}}`
}

// harness is an Intake on a fresh database with a fake Temporal.
type harness struct {
	in *intake.Intake
	tc *testenv.FakeTemporal
	db *pgxpool.Pool
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	db := storetest.NewPool(tb)
	tc := testenv.NewFakeTemporal()
	in, err := intake.New(store.New(db), tc, intake.Config{Logger: testenv.Logger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	return &harness{in: in, tc: tc, db: db}
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

// TestOversizedLinesStayDistinct feeds JSON lines over the size limit
// through the path `starter send` takes (DecodeStream, then RejectInvalid
// with the decode error): each distinct message is its own too_large row,
// and a copy counts on its row.
func TestOversizedLinesStayDistinct(t *testing.T) {
	h := newHarness(t)
	msgs := []string{oversizedMsg("evt_big_a"), oversizedMsg("evt_big_b"), oversizedMsg("evt_big_a")}
	ctx := context.Background()
	err := route.Default().DecodeStream(strings.NewReader(strings.Join(msgs, "\n")+"\n"), func(_ int, raw []byte, _ *message.Message, derr error) error {
		res, err := h.in.RejectInvalid(ctx, raw, "starter", derr)
		if err != nil {
			return err
		}
		if res.Status != intake.StatusInvalid || res.Reason != store.ReasonTooLarge || !strings.Contains(res.Error, "the limit is 65536") {
			t.Errorf("result %+v, want invalid, reason too_large, with the size in the error", res)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.checkOversizedRows(t, msgs)
}

// TestEveryQuarantinePathIsBounded: whatever path quarantines a message
// that is not too_large by decode — a delivery past max deliver from a
// stream without a size limit, an inbox row that no longer decodes — a raw
// over message.MaxSize keeps only its prefix, with its size and the SHA-256
// of the whole; a bad message within the limit is kept whole.
func TestEveryQuarantinePathIsBounded(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	big := oversizedMsg("evt_big_deliver")
	for reason, raw := range map[string]string{store.ReasonMaxDeliver: big, store.ReasonInvalid: oversizedMsg("evt_big_inbox")} {
		res, err := intake.Reject(h.in, ctx, []byte(raw), "jetstream", "", "", reason, errors.New("test"))
		if err != nil || res.Status != intake.StatusInvalid {
			t.Fatalf("reject %s: %v, %v", reason, res.Status, err)
		}
	}
	// At the limit: kept whole.
	atLimit := `{"id":"evt_at_limit","type":"order.placed","data":{"pad":"` + strings.Repeat("p", message.MaxSize) + `"}}`
	atLimit = atLimit[:message.MaxSize]
	if _, err := intake.Reject(h.in, ctx, []byte(atLimit), "inbox", "orders", "evt_at_limit", store.ReasonInvalid, errors.New("test")); err != nil {
		t.Fatal(err)
	}
	rows := h.quarantineRows(t)
	if len(rows) != 3 {
		t.Fatalf("%d quarantine rows, want 3", len(rows))
	}
	for _, r := range rows {
		if len(r.Raw) > message.MaxSize {
			t.Errorf("row %s keeps %d bytes, over the limit %d", r.Reason, len(r.Raw), message.MaxSize)
		}
	}
	bigSum := sha256.Sum256([]byte(big))
	r := rows[hex.EncodeToString(bigSum[:])]
	if r.Reason != store.ReasonMaxDeliver || r.Size != int64(len(big)) || string(r.Raw) != big[:message.OversizedPrefix] {
		t.Errorf("oversized row: reason %s, size %d, %d bytes kept; want max_deliver, size %d and the first %d bytes", r.Reason, r.Size, len(r.Raw), len(big), message.OversizedPrefix)
	}
	limitSum := sha256.Sum256([]byte(atLimit))
	if r := rows[hex.EncodeToString(limitSum[:])]; string(r.Raw) != atLimit || r.Size != message.MaxSize {
		t.Errorf("row at the limit keeps %d of %d bytes (size %d), want it whole", len(r.Raw), message.MaxSize, r.Size)
	}
}
