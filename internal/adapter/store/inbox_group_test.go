package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// inboxTxns counts the transactions that record inbox rows: a pipelined
// batch is one (an implicit transaction), a statement outside a batch is
// one; grouped counts the calls the batches recorded.
type inboxTxns struct {
	singles, groups, grouped atomic.Int64
}

type inBatchKey struct{}

func (c *inboxTxns) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatchKey{}) == nil && strings.Contains(d.SQL, "INSERT INTO inbox") {
		c.singles.Add(1)
	}
	return ctx
}

func (c *inboxTxns) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *inboxTxns) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	n := 0
	for _, q := range d.Batch.QueuedQueries {
		n += store.InboxGroupSize(q.SQL, q.Arguments)
	}
	if n > 0 {
		c.groups.Add(1)
		c.grouped.Add(int64(n))
	}
	return context.WithValue(ctx, inBatchKey{}, true)
}

func (c *inboxTxns) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *inboxTxns) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func tracedStore(t *testing.T) (*store.Store, *inboxTxns) {
	t.Helper()
	url := storetest.NewDatabase(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	tr := &inboxTxns{}
	pc.ConnConfig.Tracer = tr
	pc.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool), tr
}

// concurrently runs the entries' InsertInbox calls at once, one goroutine
// each, and returns their answers in the entries' order.
func concurrently(s *store.Store, entries []store.InboxEntry) ([]store.InboxResult, []error) {
	res, errs := make([]store.InboxResult, len(entries)), make([]error, len(entries))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, e := range entries {
		wg.Go(func() {
			<-start
			res[i], errs[i] = s.InsertInbox(context.Background(), e)
		})
	}
	close(start)
	wg.Wait()
	return res, errs
}

// Concurrent inserts share transactions, and each caller still gets its
// own answer: exactly one of the copies of a message inserted it, the
// others see the row and count as duplicates, and a payload mismatch is
// reported to its caller.
func TestInboxGroupCommit(t *testing.T) {
	ctx := context.Background()
	s, tr := tracedStore(t)
	const ids, copies = 60, 3
	var entries []store.InboxEntry
	for c := range copies {
		for i := range ids {
			hash := "h"
			if c == 2 && i == 7 {
				hash = "other" // the same ID with another payload
			}
			entries = append(entries, store.InboxEntry{Consumer: "order-placed", MessageID: fmt.Sprintf("evt_g%02d", i),
				Payload: []byte(`{}`), PayloadHash: hash, Source: "test"})
		}
	}
	var inserted [ids]int
	row := map[string]string{} // the payload hash each ID was recorded with
	for round := range 5 {
		// Round 0 inserts; the later rounds only meet recorded rows.
		res, errs := concurrently(s, entries)
		for k, e := range entries {
			if errs[k] != nil {
				t.Fatalf("round %d: %s: %v", round, e.MessageID, errs[k])
			}
			if res[k].Inserted {
				inserted[k%ids]++
				row[e.MessageID] = e.PayloadHash
			}
		}
		for k, e := range entries {
			r := res[k]
			if r.State != store.InboxPending || r.PayloadHash != row[e.MessageID] || r.Mismatch(e) != (e.PayloadHash != row[e.MessageID]) {
				t.Errorf("round %d: %s (%s) answered %+v, recorded with %q", round, e.MessageID, e.PayloadHash, r, row[e.MessageID])
			}
		}
	}
	for i, n := range inserted {
		if n != 1 {
			t.Errorf("evt_g%02d inserted by %d calls, want 1", i, n)
		}
	}
	var dups int
	if err := s.Pool().QueryRow(ctx, `SELECT sum(duplicates) FROM inbox`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	calls := 5 * ids * copies
	if want := calls - ids; dups != want {
		t.Errorf("duplicates counted %d, want %d", dups, want)
	}
	singles, groups, grouped := tr.singles.Load(), tr.groups.Load(), tr.grouped.Load()
	t.Logf("%d calls: %d alone, %d in %d shared transactions", calls, singles, grouped, groups)
	// A grouped call that met another transaction's uncommitted insert of
	// its key runs again alone: at least one statement per call.
	if singles+grouped < int64(calls) {
		t.Errorf("%d calls alone + %d grouped, want at least %d", singles, grouped, calls)
	}
	if txns := singles + groups; txns*2 > int64(calls) {
		t.Errorf("%d calls took %d transactions: concurrent calls did not share them", calls, txns)
	}
}

// A statement that fails fails its shared transaction; every call of the
// group then runs on its own, so only the bad one gets an error.
func TestInboxGroupFailureFallsBackToSingles(t *testing.T) {
	s, tr := tracedStore(t)
	var entries []store.InboxEntry
	for i := range 40 {
		e := store.InboxEntry{Consumer: "order-placed", MessageID: fmt.Sprintf("evt_f%02d", i), Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}
		if i%10 == 3 {
			e.Source = "bad\x00source" // Postgres refuses a NUL in text
		}
		entries = append(entries, e)
	}
	for range 20 {
		res, errs := concurrently(s, entries)
		for k, e := range entries {
			bad := strings.Contains(e.Source, "\x00")
			if bad != (errs[k] != nil) {
				t.Fatalf("%s: error %v", e.MessageID, errs[k])
			}
			if !bad && res[k].State != store.InboxPending {
				t.Errorf("%s answered %+v", e.MessageID, res[k])
			}
		}
		if tr.groups.Load() > 0 {
			break // a group met the bad row, and fell back
		}
	}
	if tr.groups.Load() == 0 {
		t.Fatal("no call shared a transaction in 20 rounds")
	}
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM inbox`).Scan(&n); err != nil || n != 36 {
		t.Fatalf("inbox holds %d rows (%v), want 36", n, err)
	}
}

// A group's commit waits for the WAL flush when it inserted a row, and
// does not when every row of it was already there (copies only bump a
// counter): the group's two statements, run in a transaction of the
// test's, leave synchronous_commit as the commit would find it.
func TestInboxGroupSynchronousCommitOnlyForCopies(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	if _, err := s.InsertInbox(ctx, store.InboxEntry{Consumer: "order-placed", MessageID: "evt_old", Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ids   []string
		stays string
	}{
		{"copies only", []string{"evt_old"}, "off"},
		{"a new row among copies", []string{"evt_old", "evt_new"}, "on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			n := len(tc.ids)
			consumers, payloads, hashes, sources := make([]string, n), make([][]byte, n), make([]string, n), make([]string, n)
			for i := range n {
				consumers[i], payloads[i], hashes[i], sources[i] = "order-placed", []byte(`{}`), "h", "test"
			}
			orders, amounts, currencies, keys, requests := make([]int64, n), make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
			if _, err := tx.Exec(ctx, store.InboxGroupInsertSQL, consumers, tc.ids, payloads, hashes, sources, orders, amounts, currencies, keys, requests); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, store.InboxGroupAsyncSQL, consumers, tc.ids); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.stays {
				t.Errorf("synchronous_commit = %s, want %s", got, tc.stays)
			}
		})
	}
}

// With Postgres out of reach, a group's calls all get the error at once:
// running each again on its own would only wait to fail the same way.
func TestInboxGroupUnreachableAnswersEveryCall(t *testing.T) {
	pc, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:5432/postgres?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	pc.ConnConfig.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		time.Sleep(20 * time.Millisecond) // long enough for the other calls to gather
		return nil, errors.New("connection refused (test)")
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := store.New(pool)
	var entries []store.InboxEntry
	for i := range 40 {
		entries = append(entries, store.InboxEntry{Consumer: "order-placed", MessageID: fmt.Sprintf("evt_u%02d", i), Payload: []byte(`{}`), PayloadHash: "h", Source: "test"})
	}
	_, errs := concurrently(s, entries)
	for k, err := range errs {
		if err == nil {
			t.Fatalf("%s: no error with Postgres out of reach", entries[k].MessageID)
		}
	}
	if n := dials.Load(); n >= int64(len(entries)) {
		t.Errorf("%d connection attempts for %d calls: the grouped calls were tried again one by one", n, len(entries))
	} else {
		t.Logf("%d connection attempts for %d calls", n, len(entries))
	}
}

// TestInboxClaimsThePayment: an entry with a payment has it claimed in the
// insert's statement (claim 1), alone or in a group, only when the insert
// creates the row and the order is free; a copy, a second message for the
// same order and a payload mismatch claim nothing. The activity's own claim
// (an older worker's, or the regular activity's) takes the intake's over.
func TestInboxClaimsThePayment(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	entry := func(id string, order int64, hash string) store.InboxEntry {
		c := claim(id, order)
		return store.InboxEntry{Consumer: "order-placed", MessageID: id, Payload: []byte(`{"id":"` + id + `"}`), PayloadHash: hash, Source: "test", Payment: &c}
	}
	r, err := s.InsertInbox(ctx, entry("evt_ic_1", 8100, "h1"))
	if err != nil || !r.Inserted || r.Claim != 1 || r.ClaimedAt.IsZero() {
		t.Fatalf("insert = %+v, %v; want inserted with claim 1", r, err)
	}
	for name, e := range map[string]store.InboxEntry{
		"a copy":                          entry("evt_ic_1", 8100, "h1"),
		"a payload mismatch":              entry("evt_ic_1", 8101, "h-other"),
		"another message, the same order": entry("evt_ic_2", 8100, "h2"),
	} {
		r, err := s.InsertInbox(ctx, e)
		if err != nil || r.Claim != 0 {
			t.Errorf("%s: insert = %+v, %v; want no claim", name, r, err)
		}
	}
	if p, err := s.PaymentOf(ctx, "order-placed", "evt_ic_1"); err != nil || p.State != store.PaymentClaimed || p.OrderID != 8100 {
		t.Fatalf("payment = %+v, %v; want claimed for order 8100", p, err)
	}
	if _, err := s.PaymentOf(ctx, "order-placed", "evt_ic_2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("payment of the second message = %v, want none (the order is held)", err)
	}
	// A group: every new row with its payment claimed once.
	var wg sync.WaitGroup
	res := make([]store.InboxResult, 8)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("evt_icg_%d", i)
			r, err := s.InsertInbox(ctx, entry(id, 8200+int64(i), "h"+id))
			if err != nil {
				t.Error(err)
			}
			res[i] = r
		}()
	}
	wg.Wait()
	for i, r := range res {
		if !r.Inserted || r.Claim != 1 {
			t.Errorf("group call %d = %+v; want inserted with claim 1", i, r)
		}
	}
	// The activity's claim through the ledger takes the intake's over.
	c, err := s.ClaimPayment(ctx, claim("evt_ic_1", 8100))
	if err != nil || c.Outcome != store.ClaimOwned || c.Claim != 2 {
		t.Fatalf("ledger claim after the intake's = %+v, %v; want owned under claim 2", c, err)
	}
	if st, err := s.Status(ctx, "order-placed", "evt_ic_1"); err != nil || st.Inbox == nil || st.Inbox.State != store.InboxDispatched {
		t.Errorf("inbox after the ledger claim = %+v, %v; want dispatched", st.Inbox, err)
	}
	// A record of a payment claimed at intake marks the inbox row.
	if _, _, err := s.RecordPaidClaimingReceipt(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_icg_0", OrderID: 8200,
		Key: "payment:evt_icg_0", Claim: 1, PaymentIntentID: "pi_icg_0", Amount: 1999, Currency: "usd", WorkflowID: "order-placed/evt_icg_0"}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(ctx, "order-placed", "evt_icg_0"); err != nil || st.Inbox == nil || st.Inbox.State != store.InboxDispatched || st.Inbox.WorkflowID != "order-placed/evt_icg_0" {
		t.Errorf("inbox after the record = %+v, %v; want dispatched by its workflow", st.Inbox, err)
	}
	if _, err := s.RecordPaymentFailed(ctx, store.PaymentFailure{Consumer: "order-placed", MessageID: "evt_icg_1", OrderID: 8201,
		Key: "payment:evt_icg_1", Claim: 1, Code: "card_declined", WorkflowID: "order-placed/evt_icg_1"}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(ctx, "order-placed", "evt_icg_1"); err != nil || st.Inbox == nil || st.Inbox.State != store.InboxDispatched {
		t.Errorf("inbox after the refusal's record = %+v, %v; want dispatched", st.Inbox, err)
	}
}
