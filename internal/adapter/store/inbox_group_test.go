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
			claims, orders, amounts := make([]string, n), make([]int64, n), make([]int64, n)
			currencies, reasons, keys, requests := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			if _, err := tx.Exec(ctx, store.InboxGroupInsertSQL, consumers, tc.ids, payloads, hashes, sources, claims, orders, amounts, currencies, reasons, keys, requests); err != nil {
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

// groupClaims reads the rows of store.InboxGroupInsertSQL: each message
// ID's claim (0 for none).
func groupClaims(rows pgx.Rows, err error) (map[string]int32, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claims := map[string]int32{}
	for rows.Next() {
		var (
			inserted                                       bool
			consumer, id, state, hash, workflow, cur, piID string
			claim                                          int32
			at                                             *time.Time
		)
		if err := rows.Scan(&inserted, &consumer, &id, &state, &hash, &workflow, &claim, &at, &cur, &piID); err != nil {
			return nil, err
		}
		claims[id] = claim
	}
	return claims, rows.Err()
}

// TestInboxClaimsTheRefund: an entry with a refund has it claimed in the
// insert's statement, as ClaimRefund's first claim would (the amount
// reserved, the refunds row, the ledger row under claim 1), alone or in a
// group, only when the insert creates the row, the payment succeeded and
// the amount fits. A copy, a refund that does not fit, one of an order not
// paid yet and the second refund of one order in a group claim nothing and
// reserve nothing; in a group the rule still holds across them. The
// activity's claim through the ledger takes the intake's over (claim 2)
// and reserves nothing more.
func TestInboxClaimsTheRefund(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	paid := func(id string, order int64) {
		t.Helper()
		c, err := s.ClaimPayment(ctx, claim(id, order))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: id, OrderID: order,
			Key: "payment:" + id, Claim: c.Claim, PaymentIntentID: "pi_" + id, Amount: 1999, Currency: "usd"}); err != nil {
			t.Fatal(err)
		}
	}
	refund := func(id string, order, amount int64) store.RefundClaim {
		return store.RefundClaim{Consumer: "order-refund", MessageID: id, OrderID: order, Amount: amount, Reason: "requested_by_customer",
			Key: "refund:" + id, RequestHash: "h-" + id}
	}
	entry := func(rc store.RefundClaim, hash string) store.InboxEntry {
		return store.InboxEntry{Consumer: rc.Consumer, MessageID: rc.MessageID, Payload: []byte(`{"id":"` + rc.MessageID + `"}`),
			PayloadHash: hash, Source: "test", Refund: &rc}
	}
	refunded := func(order int64) int64 {
		t.Helper()
		n, _, err := s.RefundedAmount(ctx, order)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	paid("evt_rp_1", 8300)

	r, err := s.InsertInbox(ctx, entry(refund("evt_ir_1", 8300, 500), "h1"))
	if err != nil || !r.Inserted || r.Claim != 1 || r.ClaimedAt.IsZero() || r.PaymentIntentID != "pi_evt_rp_1" || r.Currency != "usd" {
		t.Fatalf("insert = %+v, %v; want inserted with claim 1 of pi_evt_rp_1 in usd", r, err)
	}
	if rf, err := s.RefundOf(ctx, "order-refund", "evt_ir_1"); err != nil || rf.State != store.RefundClaimed || rf.Amount != 500 ||
		rf.PaymentIntentID != "pi_evt_rp_1" || !rf.CreatedAt.Equal(r.ClaimedAt) {
		t.Errorf("refunds row = %+v, %v; want 500 claimed of pi_evt_rp_1 at %s", rf, err, r.ClaimedAt)
	}
	if e, err := s.Effect(ctx, "refund:evt_ir_1"); err != nil || e.Claim != 1 || e.State != store.StateClaimed || e.Kind != store.KindRefund {
		t.Errorf("ledger row = %+v, %v; want a refund claimed under claim 1", e, err)
	}
	if n := refunded(8300); n != 500 {
		t.Errorf("refunded = %d, want 500 reserved", n)
	}
	if _, err := s.ClaimPayment(ctx, claim("evt_rp_open", 8301)); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]store.InboxEntry{
		"a copy":                   entry(refund("evt_ir_1", 8300, 500), "h1"),
		"a payload mismatch":       entry(refund("evt_ir_1", 8300, 700), "h-other"),
		"more than remains":        entry(refund("evt_ir_2", 8300, 1500), "h2"),
		"an order with no payment": entry(refund("evt_ir_3", 8399, 100), "h3"),
		"a payment still open":     entry(refund("evt_ir_4", 8301, 100), "h4"),
	} {
		r, err := s.InsertInbox(ctx, e)
		if err != nil || r.Claim != 0 || r.PaymentIntentID != "" {
			t.Errorf("%s: insert = %+v, %v; want no claim", name, r, err)
		}
		if _, err := s.RefundOf(ctx, e.Consumer, e.MessageID); e.MessageID != "evt_ir_1" && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: refunds row %v, want none", name, err)
		}
	}
	if n := refunded(8300); n != 500 {
		t.Errorf("refunded after the refusals = %d, want 500", n)
	}

	// Groups: two refunds of 1,200 for each of 20 orders paid 1,999, sent at
	// once; at most one per order is claimed, and none is claimed twice.
	const orders = 20
	var entries []store.InboxEntry
	for i := range orders {
		paid(fmt.Sprintf("evt_rpg_%d", i), 8400+int64(i))
	}
	for c := range 2 {
		for i := range orders {
			id := fmt.Sprintf("evt_irg_%d_%d", i, c)
			entries = append(entries, entry(refund(id, 8400+int64(i), 1200), "h"+id))
		}
	}
	res, errs := concurrently(s, entries)
	claimed := map[int64]int{}
	for i, r := range res {
		if errs[i] != nil || !r.Inserted {
			t.Errorf("group call %d = %+v, %v; want inserted", i, r, errs[i])
		}
		if r.Claim == 1 {
			claimed[entries[i].Refund.OrderID]++
		}
	}
	for i := range orders {
		order := 8400 + int64(i)
		if n, got := refunded(order), claimed[order]; n != 1200*int64(got) || got > 1 {
			t.Errorf("order %d: refunded %d with %d claimed at intake; want at most one of 1200", order, n, got)
		}
	}
	if len(claimed) < orders/2 {
		t.Errorf("%d of %d orders had a refund claimed at intake", len(claimed), orders)
	}
	t.Logf("groups: %d of %d orders with a refund claimed at intake", len(claimed), orders)

	// One statement with two refunds of one order, both of which would fit
	// alone: the first by message ID is claimed, the other claims nothing.
	paid("evt_rp_two", 8500)
	claims, err := groupClaims(s.Pool().Query(ctx, store.InboxGroupInsertSQL,
		[]string{"order-refund", "order-refund"}, []string{"evt_irt_a", "evt_irt_b"}, [][]byte{[]byte(`{}`), []byte(`{}`)},
		[]string{"ha", "hb"}, []string{"test", "test"}, []string{"refund", "refund"}, []int64{8500, 8500}, []int64{600, 700},
		[]string{"", ""}, []string{"requested_by_customer", "requested_by_customer"}, []string{"refund:evt_irt_a", "refund:evt_irt_b"}, []string{"h-a", "h-b"}))
	if err != nil {
		t.Fatal(err)
	}
	var claimedIDs []string
	for id, c := range claims {
		if c == 1 {
			claimedIDs = append(claimedIDs, id)
		}
	}
	if len(claimedIDs) != 1 || claimedIDs[0] != "evt_irt_a" || refunded(8500) != 600 {
		t.Errorf("one statement, two refunds of one order: claimed %v, refunded %d; want evt_irt_a alone, 600", claimedIDs, refunded(8500))
	}

	// The activity's claim through the ledger takes the intake's over and
	// reserves nothing more.
	c, err := s.ClaimRefund(ctx, refund("evt_ir_1", 8300, 500))
	if err != nil || c.Decision != store.RefundOwned || c.Claim != 2 || c.Refund.PaymentIntentID != "pi_evt_rp_1" {
		t.Fatalf("ledger claim after the intake's = %+v, %v; want owned under claim 2", c, err)
	}
	if n := refunded(8300); n != 500 {
		t.Errorf("refunded after the ledger claim = %d, want 500", n)
	}
	// The intake's token still records nothing once fenced; the ledger's does.
	if _, err := s.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: "evt_ir_1", OrderID: 8300,
		Key: "refund:evt_ir_1", Claim: 1, RefundID: "re_1", Status: "succeeded"}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("record under the intake's token after the takeover = %v, want fenced", err)
	}
	if _, err := s.RecordRefundSucceeded(ctx, store.RefundSuccess{Consumer: "order-refund", MessageID: "evt_ir_1", OrderID: 8300,
		Key: "refund:evt_ir_1", Claim: 2, RefundID: "re_1", Status: "succeeded"}); err != nil {
		t.Errorf("record under claim 2 = %v", err)
	}
}

// TestInboxCallGivenUpBeforeItsGroup: a call whose caller gave up before
// its group was taken (its context done) is answered with that error, and
// a group of only such calls records nothing and leaves the flusher
// working (it panicked on an empty group).
func TestInboxCallGivenUpBeforeItsGroup(t *testing.T) {
	s := store.New(storetest.NewPool(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := store.InboxEntry{Consumer: "order-placed", MessageID: "evt_gone", Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}
	if _, err := s.InsertInbox(ctx, e); !errors.Is(err, context.Canceled) {
		t.Fatalf("insert with a cancelled context = %v, want context.Canceled", err)
	}
	if has, err := s.InboxHas(context.Background(), "order-placed", "evt_gone"); err != nil || has {
		t.Fatalf("inbox has evt_gone = %v, %v; want nothing recorded", has, err)
	}
	if r, err := s.InsertInbox(context.Background(), e); err != nil || !r.Inserted {
		t.Fatalf("insert after = %+v, %v; want inserted", r, err)
	}
}

// TestInboxLeadReturnsOnceItsGroupIsIn: a caller that leads a flush
// returns once its own group is recorded, though calls gathered while it
// flushed are still waiting (Postgres slow for them): it hands them to a
// goroutine rather than record them on its caller's time. Each message's
// insert here waits for an advisory lock the test holds on its ID.
func TestInboxLeadReturnsOnceItsGroupIsIn(t *testing.T) {
	url := storetest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.New(pool)
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION held() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(NEW.message_id)); RETURN NEW; END $$;
		CREATE TRIGGER held BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION held();`); err != nil {
		t.Fatal(err)
	}
	locks, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close(ctx) })
	hold := func(id string, on bool) {
		t.Helper()
		fn := "pg_advisory_unlock"
		if on {
			fn = "pg_advisory_lock"
		}
		if _, err := locks.Exec(ctx, `SELECT `+fn+`(hashtext($1))`, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		hold(id, true)
	}
	t.Cleanup(func() {
		for _, id := range []string{"m2", "m3"} {
			hold(id, false)
		}
	})
	insert := func(id string) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := st.InsertInbox(ctx, store.InboxEntry{Consumer: "c", MessageID: id, Payload: []byte("{}"), PayloadHash: "h", Source: "test"})
			done <- err
		}()
		return done
	}
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var got int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d inserts wait for their lock, want %d", got, n)
			}
		}
	}
	// m1 and m2 lead a flush each (maxInboxFlushers); m3 queues behind.
	first := insert("m1")
	waiting(1)
	_ = insert("m2")
	waiting(2)
	third := insert("m3")
	time.Sleep(200 * time.Millisecond) // m3 is queued
	hold("m1", false)
	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("m1's caller did not return once m1 was in: it is recording m3's group, which Postgres holds")
	}
	select {
	case err := <-third:
		t.Fatalf("m3 answered (%v) while its insert is held", err)
	default:
	}
}
