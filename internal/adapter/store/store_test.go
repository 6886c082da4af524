package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

func claim(msg string, order int64) store.PaymentClaim {
	return store.PaymentClaim{
		Consumer: "order-placed", MessageID: msg, OrderID: order, Amount: 1999, Currency: "usd",
		Key: "payment:" + msg, RequestHash: "h-" + msg,
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- store.Migrate(ctx, pool, nil) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("second migrate: %v", err)
		}
	}
}

func TestPaymentLifecycle(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))

	res, err := s.ClaimPayment(ctx, claim("evt_1", 42))
	if err != nil || res.Outcome != store.ClaimOwned || res.Claim != 1 {
		t.Fatalf("first claim = %+v, %v", res, err)
	}
	// A retry (or the regular activity after a local one) takes the row
	// over under the next token.
	res, err = s.ClaimPayment(ctx, claim("evt_1", 42))
	if err != nil || res.Outcome != store.ClaimOwned || res.Claim != 2 {
		t.Fatalf("retry claim = %+v, %v", res, err)
	}
	// The superseded claim 1 can no longer record.
	_, err = s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_1", OrderID: 42, Key: "payment:evt_1", Claim: 1, PaymentIntentID: "pi_1"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("zombie record err = %v, want ErrFenced", err)
	}
	// Nor can a token that was never handed out.
	_, err = s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_1", OrderID: 42, Key: "payment:evt_1", Claim: 3, PaymentIntentID: "pi_1"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("record under a future token err = %v, want ErrFenced", err)
	}
	ok := store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_1", OrderID: 42, Key: "payment:evt_1", Claim: 2, PaymentIntentID: "pi_1", Amount: 1999, Currency: "usd"}
	already, err := s.RecordPaymentSucceeded(ctx, ok)
	if err != nil || already {
		t.Fatalf("record = %v, %v", already, err)
	}
	already, err = s.RecordPaymentSucceeded(ctx, ok)
	if err != nil || !already {
		t.Fatalf("repeated record = %v, %v; want already", already, err)
	}
	res, err = s.ClaimPayment(ctx, claim("evt_1", 42))
	if err != nil || res.Outcome != store.ClaimDone || res.Payment.PaymentIntentID != "pi_1" {
		t.Fatalf("claim after success = %+v, %v", res, err)
	}
	// A second message for the same order is a business duplicate.
	res, err = s.ClaimPayment(ctx, claim("evt_2", 42))
	if err != nil || res.Outcome != store.ClaimBusinessDuplicate || res.Payment.MessageID != "evt_1" {
		t.Fatalf("second message claim = %+v, %v", res, err)
	}

	st, err := s.Status(ctx, "order-placed", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Order == nil || st.Order.Status != store.OrderPaid || st.Processed == nil || st.Processed.Outcome != store.OutcomePaid {
		t.Fatalf("status = %+v", st)
	}
	st2, err := s.Status(ctx, "order-placed", "evt_2")
	if err != nil || st2.Processed == nil || st2.Processed.Outcome != store.OutcomeBusinessDuplicate {
		t.Fatalf("status of business duplicate = %+v, %v", st2, err)
	}
	var processed, outbox int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM processed_messages`).Scan(&processed); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM outbox WHERE event_id = 'order.paid:evt_1'`).Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	if processed != 2 || outbox != 1 {
		t.Fatalf("processed rows = %d (want 2), outbox rows = %d (want 1)", processed, outbox)
	}
}

func TestPaymentFailed(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	c, err := s.ClaimPayment(ctx, claim("evt_d", 7))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.RecordPaymentFailed(ctx, store.PaymentFailure{Consumer: "order-placed", MessageID: "evt_d", OrderID: 7, Key: "payment:evt_d", Claim: c.Claim, Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined."})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx, "order-placed", "evt_d")
	if err != nil {
		t.Fatal(err)
	}
	if st.Order.Status != store.OrderPaymentFailed || st.Payment.DeclineCode != "generic_decline" || st.Processed.Outcome != store.OutcomePaymentFailed {
		t.Fatalf("status = %+v %+v %+v", st.Order, st.Payment, st.Processed)
	}
}

func TestRequestMismatch(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	if _, err := s.ClaimPayment(ctx, claim("evt_m", 9)); err != nil {
		t.Fatal(err)
	}
	c := claim("evt_m", 9)
	c.RequestHash = "other"
	if _, err := s.ClaimPayment(ctx, c); !errors.Is(err, store.ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
}

func TestEmailPolicies(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	if _, err := s.ClaimPayment(ctx, claim("evt_e", 5)); err != nil {
		t.Fatal(err)
	}
	ec := store.EmailClaim{Consumer: "order-placed", MessageID: "evt_e", OrderID: 5, Key: "email:evt_e", RequestHash: "m", Policy: store.AtLeastOnce}
	d, e, err := s.ClaimEmail(ctx, ec)
	if err != nil || d != store.EmailSend || e.Claim != 1 {
		t.Fatalf("first claim = %v %+v, %v", d, e, err)
	}
	// Crash before the record: at-least-once sends again on retry.
	if d, e, err = s.ClaimEmail(ctx, ec); err != nil || d != store.EmailSend || e.Claim != 2 {
		t.Fatalf("retry claim = %v %+v, %v", d, e, err)
	}
	// The first claim's record is fenced; the second's lands.
	if _, err := s.RecordEmailSent(ctx, "email:evt_e", 1, 5, "sg_0"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("superseded record err = %v, want ErrFenced", err)
	}
	if _, err := s.RecordEmailSent(ctx, "email:evt_e", 2, 5, "sg_1"); err != nil {
		t.Fatal(err)
	}
	d, e, err = s.ClaimEmail(ctx, ec)
	if err != nil || d != store.EmailDone || e.ProviderRef != "sg_1" {
		t.Fatalf("claim after send = %v %+v %v", d, e, err)
	}

	// At-most-once: a retry that finds in_flight refuses to resend.
	if _, err := s.ClaimPayment(ctx, claim("evt_f", 6)); err != nil {
		t.Fatal(err)
	}
	am := store.EmailClaim{Consumer: "order-placed", MessageID: "evt_f", OrderID: 6, Key: "email:evt_f", RequestHash: "m", Policy: store.AtMostOnce}
	if d, _, err := s.ClaimEmail(ctx, am); err != nil || d != store.EmailSend {
		t.Fatalf("at-most-once first = %v, %v", d, err)
	}
	if d, e, err := s.ClaimEmail(ctx, am); err != nil || d != store.EmailUnknown || e.State != store.StateUnknown {
		t.Fatalf("at-most-once retry = %v %+v %v", d, e, err)
	}
	st, err := s.Status(ctx, "order-placed", "evt_f")
	if err != nil || st.Order.ReceiptStatus != "unknown" {
		t.Fatalf("receipt status = %+v, %v", st.Order, err)
	}
}

// TestReleaseEffect: a claim that sent nothing gives its row back. The next
// claim is as good as the first (Unsent) only while every claim before it
// did; an at-most-once row given back is sent, not settled unknown; a
// superseded claim cannot give back its successor's row.
func TestReleaseEffect(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	if _, err := s.ClaimPayment(ctx, claim("evt_u", 7)); err != nil {
		t.Fatal(err)
	}
	am := store.EmailClaim{Consumer: "order-placed", MessageID: "evt_u", OrderID: 7, Key: "email:evt_u", RequestHash: "m", Policy: store.AtMostOnce}
	if d, e, err := s.ClaimEmail(ctx, am); err != nil || d != store.EmailSend || !e.Unsent() || e.State != store.StateInFlight {
		t.Fatalf("first claim = %v %+v, %v", d, e, err)
	}
	if err := s.ReleaseEffect(ctx, "email:evt_u", 1); err != nil {
		t.Fatal(err)
	}
	d, e, err := s.ClaimEmail(ctx, am)
	if err != nil || d != store.EmailSend || e.Claim != 2 || !e.Unsent() {
		t.Fatalf("claim after a release = %v %+v, %v; want a send, as good as the first", d, e, err)
	}
	if err := s.ReleaseEffect(ctx, "email:evt_u", 1); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("release by a superseded claim: %v, want ErrFenced", err)
	}
	// Claim 2 is not given back (it may have sent): claim 3 is not the
	// first, even after claim 3 itself is given back.
	ec := am
	ec.Policy = store.AtLeastOnce
	if d, e, err = s.ClaimEmail(ctx, ec); err != nil || d != store.EmailSend || e.Claim != 3 || e.Unsent() {
		t.Fatalf("claim after a possible send = %v %+v, %v", d, e, err)
	}
	if err := s.ReleaseEffect(ctx, "email:evt_u", 3); err != nil {
		t.Fatal(err)
	}
	if d, e, err = s.ClaimEmail(ctx, ec); err != nil || e.Claim != 4 || e.Unsent() {
		t.Fatalf("claim 4 = %v %+v, %v; want not unsent (claim 2 may have sent)", d, e, err)
	}
	if _, err := s.RecordEmailSent(ctx, "email:evt_u", 4, 7, "sg_u"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseEffect(ctx, "email:evt_u", 4); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("release of a settled row: %v, want ErrFenced", err)
	}
}

func TestInbox(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	e := store.InboxEntry{Consumer: "order-placed", MessageID: "evt_i", Payload: []byte(`{}`), PayloadHash: "h1", Source: "test"}
	r, err := s.InsertInbox(ctx, e)
	if err != nil || !r.Inserted || r.State != store.InboxPending {
		t.Fatalf("first insert = %+v, %v", r, err)
	}
	r, err = s.InsertInbox(ctx, e)
	if err != nil || r.Inserted || r.Mismatch(e) {
		t.Fatalf("duplicate insert = %+v, %v", r, err)
	}
	e2 := e
	e2.PayloadHash = "h2"
	if r, err = s.InsertInbox(ctx, e2); err != nil || r.Inserted || !r.Mismatch(e2) {
		t.Fatalf("mismatch insert = %+v, %v", r, err)
	}
	if err := s.MarkDispatched(ctx, "order-placed", "evt_i", "order-placed/evt_i"); err != nil {
		t.Fatal(err)
	}
	if r, err = s.InsertInbox(ctx, e); err != nil || r.State != store.InboxDispatched || r.WorkflowID != "order-placed/evt_i" {
		t.Fatalf("after dispatch = %+v, %v", r, err)
	}
	st, err := s.Status(ctx, "order-placed", "evt_i")
	if err != nil || st.Inbox == nil || st.Inbox.Duplicates != 3 {
		t.Fatalf("inbox status = %+v, %v", st.Inbox, err)
	}

	// Concurrent inserts of one new ID: exactly one wins.
	var wg sync.WaitGroup
	wins := make(chan bool, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.InsertInbox(ctx, store.InboxEntry{Consumer: "order-placed", MessageID: "evt_race", Payload: []byte(`{}`), PayloadHash: "h", Source: "test"})
			if err != nil {
				t.Error(err)
			}
			wins <- r.Inserted
		}()
	}
	wg.Wait()
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d concurrent inserts won, want 1", n)
	}
}

func TestQuarantine(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	id, err := s.Quarantine(ctx, store.QuarantineEntry{Source: "starter", Raw: []byte("{bad"), Reason: store.ReasonInvalid, Detail: "syntax"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.QuarantineGet(ctx, id)
	if err != nil || string(got.Raw) != "{bad" || got.Reason != store.ReasonInvalid {
		t.Fatalf("got %+v, %v", got, err)
	}
	if err := s.QuarantineMarkRetried(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QuarantineGet(ctx, id+100); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing entry err = %v", err)
	}
}

func TestQuarantineCountsCopies(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	e := store.QuarantineEntry{Source: "starter", Raw: []byte(`{"id":"x"}`), Reason: store.ReasonInvalid, Detail: "d"}
	id1, err := s.Quarantine(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.Quarantine(ctx, e)
	if err != nil || id2 != id1 {
		t.Fatalf("second quarantine of the same bytes = %d, %v; want %d", id2, err, id1)
	}
	got, err := s.QuarantineGet(ctx, id1)
	if err != nil || got.Copies != 2 {
		t.Fatalf("entry = %+v, %v; want 2 copies", got, err)
	}
	e.Reason = store.ReasonPayloadMismatch
	if id3, err := s.Quarantine(ctx, e); err != nil || id3 == id1 {
		t.Fatalf("another reason = %d, %v; want a new entry", id3, err)
	}
}

// TestInboxAsyncCommitStaysInTheStatement: InsertInbox turns synchronous
// commit off for a copy's statement; the setting must not outlive it, or
// the next statement on the connection (a new message's insert, a ledger
// record) would commit without waiting for the WAL flush. That the copy's
// commit is asynchronous is not observable here; the bench's duplicate burst
// shows its effect.
func TestInboxAsyncCommitStaysInTheStatement(t *testing.T) {
	ctx := context.Background()
	pool := oneConnection(t)
	s := store.New(pool)
	e := store.InboxEntry{Consumer: "order-placed", MessageID: "evt_async", Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}
	for i := range 3 {
		r, err := s.InsertInbox(ctx, e)
		if err != nil || r.Inserted != (i == 0) {
			t.Fatalf("insert %d = %+v, %v", i, r, err)
		}
		var sc string
		if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "on" {
			t.Fatalf("after insert %d the connection's synchronous_commit is %q (%v), want on", i, sc, err)
		}
	}
	var dups int
	if err := pool.QueryRow(ctx, `SELECT duplicates FROM inbox WHERE message_id = 'evt_async'`).Scan(&dups); err != nil || dups != 2 {
		t.Fatalf("duplicates = %d, %v; want 2", dups, err)
	}
}

// oneConnection is a migrated database's pool of one connection: what a
// statement leaves set on its connection, the next one sees.
func oneConnection(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(context.Background(), storetest.NewDatabase(t), store.PoolConfig{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(context.Background(), pool, nil); err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestRateReservationCommitsAsynchronously: a rate reservation's
// transaction commits without waiting for its WAL flush (migration 00019),
// so the bucket rows it locks are not held through one; the setting ends
// with that transaction, so the next statement on the connection (a ledger
// record) commits synchronously again.
func TestRateReservationCommitsAsynchronously(t *testing.T) {
	ctx := context.Background()
	pool := oneConnection(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a failure must free the pool's one connection
	var reserved bool
	var sc string
	if err := tx.QueryRow(ctx, `SELECT reserved FROM rate_reserve_async(ARRAY['stripe'], ARRAY[0.05::float8], ARRAY[1::float8], 1, 'order-placed', 0.25, 0.2)`).Scan(&reserved); err != nil || !reserved {
		t.Fatalf("reserve in a transaction = %v, %v", reserved, err)
	}
	if err := tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "off" {
		t.Fatalf("in the reservation's transaction synchronous_commit is %q (%v), want off", sc, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s := store.New(pool)
	res, err := s.ReserveRate(ctx, store.Reservation{Buckets: []store.RateBucket{{Name: "stripe", Rate: 20, Burst: 1}}, MaxWait: time.Second})
	if err != nil || !res.OK {
		t.Fatalf("ReserveRate = %+v, %v", res, err)
	}
	if err := pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("after ReserveRate the connection's synchronous_commit is %q (%v), want on", sc, err)
	}
}

// TestClaimMarksInboxDispatched: the payment claim marks the message's inbox
// row dispatched in its first statement, whatever the claim's outcome (a
// business duplicate included), and skips a row a Dispatcher holds locked
// rather than waiting for it.
func TestClaimMarksInboxDispatched(t *testing.T) {
	ctx := context.Background()
	pool := storetest.NewPool(t)
	s := store.New(pool)
	inbox := func(msg string) {
		t.Helper()
		if _, err := s.InsertInbox(ctx, store.InboxEntry{Consumer: "order-placed", MessageID: msg, Payload: []byte(`{}`), PayloadHash: "h", Source: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	state := func(msg string) (st, wfID string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT state, coalesce(workflow_id, '') FROM inbox WHERE consumer = 'order-placed' AND message_id = $1`, msg).Scan(&st, &wfID); err != nil {
			t.Fatal(err)
		}
		return st, wfID
	}
	withWF := func(c store.PaymentClaim) store.PaymentClaim {
		c.WorkflowID = "order-placed/" + c.MessageID
		return c
	}

	inbox("evt_ib1")
	if res, err := s.ClaimPayment(ctx, withWF(claim("evt_ib1", 77))); err != nil || res.Outcome != store.ClaimOwned {
		t.Fatalf("claim = %+v, %v", res, err)
	}
	if st, wf := state("evt_ib1"); st != "dispatched" || wf != "order-placed/evt_ib1" {
		t.Fatalf("inbox row after the claim: %s %q; want dispatched by order-placed/evt_ib1", st, wf)
	}

	// A business duplicate (another message, the same order) is marked too.
	inbox("evt_ib2")
	if res, err := s.ClaimPayment(ctx, withWF(claim("evt_ib2", 77))); err != nil || res.Outcome != store.ClaimBusinessDuplicate {
		t.Fatalf("duplicate claim = %+v, %v", res, err)
	}
	if st, _ := state("evt_ib2"); st != "dispatched" {
		t.Fatalf("business duplicate's inbox row is %s; want dispatched", st)
	}

	// A row a Dispatcher holds (or a copy's insert, counting itself) is
	// skipped at once, not waited for.
	inbox("evt_ib3")
	inbox("evt_ib4")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM inbox WHERE message_id = 'evt_ib3' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM inbox WHERE message_id = 'evt_ib4' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	paid, err := s.ClaimPayment(cctx, withWF(claim("evt_ib3", 78)))
	if err != nil || paid.Outcome != store.ClaimOwned {
		t.Fatalf("claim beside a locked inbox row = %+v, %v", paid, err)
	}
	refused, err := s.ClaimPayment(cctx, withWF(claim("evt_ib4", 79)))
	if err != nil || refused.Outcome != store.ClaimOwned {
		t.Fatalf("claim beside a locked inbox row = %+v, %v", refused, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := state("evt_ib3"); st != "pending" {
		t.Fatalf("locked inbox row is %s after the claim; want pending (its Dispatcher marks it)", st)
	}

	// The payment's record, the lock gone, marks the row the claim skipped,
	// whether Stripe charged or refused.
	if _, err := s.RecordPaymentSucceeded(ctx, store.PaymentSuccess{Consumer: "order-placed", MessageID: "evt_ib3", OrderID: 78,
		Key: "payment:evt_ib3", Claim: paid.Claim, PaymentIntentID: "pi_ib3", Amount: 1999, Currency: "usd", WorkflowID: "order-placed/evt_ib3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPaymentFailed(ctx, store.PaymentFailure{Consumer: "order-placed", MessageID: "evt_ib4", OrderID: 79,
		Key: "payment:evt_ib4", Claim: refused.Claim, Code: "card_declined", WorkflowID: "order-placed/evt_ib4"}); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"evt_ib3", "evt_ib4"} {
		if st, wf := state(msg); st != "dispatched" || wf != "order-placed/"+msg {
			t.Fatalf("inbox row %s after the record: %s %q; want dispatched by order-placed/%s", msg, st, wf, msg)
		}
	}
}

// TestReceiptClaimedByThePaymentRecord: the payment's record claims the
// receipt under claim 1 for the one record that settles the payment; a
// repeat of that record claims nothing, and any later claim through the
// ledger counts the token up, so the record's holder is fenced.
func TestReceiptClaimedByThePaymentRecord(t *testing.T) {
	ctx := context.Background()
	s := store.New(storetest.NewPool(t))
	for _, policy := range []store.EmailPolicy{store.AtLeastOnce, store.AtMostOnce} {
		msg := "evt_rc_" + string(policy)
		c, err := s.ClaimPayment(ctx, claim(msg, 7100+int64(len(policy))))
		if err != nil || c.Outcome != store.ClaimOwned {
			t.Fatalf("%s: claim = %+v, %v", policy, c, err)
		}
		mail := store.EmailClaim{Consumer: "order-placed", MessageID: msg, OrderID: c.Payment.OrderID, Key: "email:" + msg, RequestHash: "m-" + msg, Policy: policy}
		rec := store.PaymentSuccess{Consumer: "order-placed", MessageID: msg, OrderID: c.Payment.OrderID, Key: "payment:" + msg, Claim: c.Claim,
			PaymentIntentID: "pi_" + msg, Amount: 1999, Currency: "usd", Receipt: &mail}
		already, token, err := s.RecordPaidClaimingReceipt(ctx, rec)
		if err != nil || already || token != 1 {
			t.Fatalf("%s: record = already %v, receipt claim %d, %v; want the receipt claimed under 1", policy, already, token, err)
		}
		e, err := s.Effect(ctx, mail.Key)
		wantState := store.StateClaimed
		if policy == store.AtMostOnce {
			wantState = store.StateInFlight
		}
		if err != nil || e.State != wantState || e.Claim != 1 {
			t.Fatalf("%s: receipt row = %+v, %v; want %s under claim 1", policy, e, err, wantState)
		}
		st, err := s.Status(ctx, "order-placed", msg)
		if err != nil || st.Order == nil || st.Order.Status != store.OrderPaid || st.Order.ReceiptStatus != "sending" {
			t.Fatalf("%s: order = %+v, %v; want paid, receipt sending", policy, st.Order, err)
		}
		// The same record again (an attempt run again): already, no claim.
		already, token, err = s.RecordPaidClaimingReceipt(ctx, rec)
		if err != nil || !already || token != 0 {
			t.Fatalf("%s: repeated record = already %v, receipt claim %d, %v; want already and no claim", policy, already, token, err)
		}
		decision, e, err := s.ClaimEmail(ctx, mail)
		switch policy {
		case store.AtLeastOnce:
			if err != nil || decision != store.EmailSend || e.Claim != 2 {
				t.Fatalf("%s: claim after the record = %s %+v, %v; want send under claim 2", policy, decision, e, err)
			}
			if _, err := s.RecordEmailSent(ctx, mail.Key, 1, mail.OrderID, "x_zombie"); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("%s: record under the payment record's claim after a new claim: %v, want ErrFenced", policy, err)
			}
		case store.AtMostOnce:
			// The record's claim is in flight: a later claim cannot know
			// whether it sent, and never resends.
			if err != nil || decision != store.EmailUnknown {
				t.Fatalf("%s: claim after the record = %s %+v, %v; want unknown", policy, decision, e, err)
			}
		}
	}
}

// TestWarmOpensConnections: Warm leaves n connections open and idle (at
// most MaxConns), so a start's first statements do not each open one.
func TestWarmOpensConnections(t *testing.T) {
	url := storetest.NewDatabase(t)
	for _, c := range []struct{ warm, max, want int32 }{{0, 8, 1}, {6, 8, 6}, {12, 4, 4}} {
		pool, err := store.Open(context.Background(), url, store.PoolConfig{MaxConns: c.max})
		if err != nil {
			t.Fatal(err)
		}
		err = store.Warm(context.Background(), pool, c.warm)
		st := pool.Stat()
		pool.Close()
		if err != nil {
			t.Fatalf("Warm %d: %v", c.warm, err)
		}
		if st.TotalConns() != c.want || st.IdleConns() != c.want {
			t.Errorf("Warm %d, MaxConns %d: %d connections open, %d idle; want %d, all idle", c.warm, c.max, st.TotalConns(), st.IdleConns(), c.want)
		}
	}
}

// TestWarmPreparesReservation: every connection Warm opens has run the rate
// limiter's reservation (its session holds the prepared statement, so its
// backend has compiled the function), and no bucket or flow row is left.
func TestWarmPreparesReservation(t *testing.T) {
	ctx := context.Background()
	pool, err := store.Open(ctx, storetest.NewDatabase(t), store.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Warm(ctx, pool, 3); err != nil {
		t.Fatal(err)
	}
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range 3 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var prepared int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, store.ReserveSQL).Scan(&prepared); err != nil {
			t.Fatal(err)
		}
		if prepared != 1 {
			t.Errorf("connection %d (backend %d): the reservation prepared %d times, want 1", len(conns), c.Conn().PgConn().PID(), prepared)
		}
	}
	if st := pool.Stat(); st.TotalConns() != 3 {
		t.Fatalf("%d connections, want the 3 warmed", st.TotalConns())
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM rate_limits) + (SELECT count(*) FROM rate_flows)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d rate rows left after the warm-up, want 0", rows)
	}
}
