package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// InboxState is inbox.state.
type InboxState string

// Inbox states.
const (
	InboxPending    InboxState = "pending"
	InboxDispatched InboxState = "dispatched"
)

// InboxEntry is a message to record in the inbox.
type InboxEntry struct {
	Consumer    string
	MessageID   string
	Payload     []byte // the message exactly as received
	PayloadHash string // canonical hash; a different hash under a seen ID is a payload mismatch
	Source      string // where it came from: "starter", "jetstream", ...
	// Payment, when set, is the order's payment to claim in the insert's
	// transaction, only when the insert creates the row (see InsertInbox):
	// its OrderID, Amount, Currency, Key and RequestHash.
	Payment *PaymentClaim
	// Refund, when set (and Payment is not), is the refund to claim in the
	// insert's transaction, as ClaimRefund's first claim would, only when
	// the insert creates the row and the refund fits (see InsertInbox): its
	// OrderID, Amount, Reason, Key and RequestHash.
	Refund *RefundClaim
}

// IntakeClaim is the effect a route's intake claims in the inbox insert's
// statement (InboxEntry.Payment, InboxEntry.Refund): at most one is set.
type IntakeClaim struct {
	Payment *PaymentClaim
	Refund  *RefundClaim
}

// InboxResult is what InsertInbox found.
type InboxResult struct {
	// Inserted is true when this call created the row: the message is new.
	Inserted bool
	// State of the row after the call (InboxPending or InboxDispatched).
	State InboxState
	// PayloadHash of the row as first recorded.
	PayloadHash string
	// WorkflowID, once dispatched.
	WorkflowID string
	// Claim is the fencing token when the insert claimed the entry's
	// Payment or Refund (1), else 0; ClaimedAt is when.
	Claim     int32
	ClaimedAt time.Time
	// PaymentIntentID and Currency are the payment's a claimed Refund
	// refunds, as its refunds row records them.
	PaymentIntentID, Currency string
}

// Mismatch reports whether the row was recorded with a different payload
// than entry: the same message ID reused for different content.
func (r InboxResult) Mismatch(e InboxEntry) bool { return r.PayloadHash != e.PayloadHash }

// InsertInbox records e unless (consumer, message ID) is already there, in one
// round trip: the insert and the read of an existing row are one statement.
// A copy of a recorded message is rejected by the primary key and counted.
//
// Concurrent calls share a transaction (group commit): a call made while
// maxInboxFlushers transactions are running waits for one to end, and the
// calls that gathered meanwhile, at most maxInboxGroup of them, go to
// Postgres together as one transaction of one statement over arrays
// (inboxGroupInsert). A call that finds room goes at once, alone, so a
// single caller pays nothing;
// under load one commit (one WAL flush) records many messages.
//
// An entry with a Payment has that payment claimed in the same statement
// when, and only when, the statement creates the inbox row and no payment
// exists for the order or the message: the order, its payment row and the
// ledger row under claim 1, which InboxResult.Claim returns. A copy, a
// payload mismatch or an order another message holds claims nothing (0),
// and the payment activity claims as it would without it.
//
// An entry with a Refund has it claimed the same way, as ClaimRefund's
// first claim does, when the statement creates the inbox row, the order's
// payment succeeded and the amount fits in what remains of it, and nothing
// of the message's refund is recorded yet: the amount reserved, the
// refunds row and the ledger row under claim 1 (one refund per order in a
// group). Anything else (no payment yet, a payment still open, a refund
// that does not fit, a copy) claims nothing, and the refund activity
// decides as it would without it.
// Each call still returns only once its row is committed, so the caller
// acks after the commit, as before. Should Postgres refuse the shared
// statement (a deadlock with another process, a bad row), every call of it
// runs again on its own and gets its own answer; should Postgres be out of
// reach, every call gets that error.
func (s *Store) InsertInbox(ctx context.Context, e InboxEntry) (InboxResult, error) {
	c := &inboxCall{ctx: ctx, e: e, done: make(chan struct{})}
	g := &s.inbox
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := g.flushers < maxInboxFlushers
	if lead {
		g.flushers++
	}
	g.mu.Unlock()
	if lead {
		// On a goroutine of its own: the caller waits for its answer or
		// its ctx, never for a transaction it cannot cut short.
		go s.flushInbox()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		// The shared transaction may still commit the row; the caller
		// treats this like any failed insert (the message comes again
		// and is recognised as a copy).
		return InboxResult{}, fmt.Errorf("insert inbox %s/%s: %w", e.Consumer, e.MessageID, ctx.Err())
	}
}

// maxInboxGroup bounds the calls one inbox transaction records.
const maxInboxGroup = 64

// maxInboxFlushers is how many inbox transactions run at once. One would
// group the most, but Postgres runs a pipeline's statements one after the
// other on one backend, so a burst of copies would be recorded on a single
// core; two keep both cores of a small machine busy and still group.
const maxInboxFlushers = 2

// inboxGroup gathers the InsertInbox calls waiting for a transaction.
type inboxGroup struct {
	mu       sync.Mutex
	queue    []*inboxCall
	flushers int // flushInbox calls running; each takes from the queue
}

// inboxCall is one InsertInbox call and, once done is closed, its answer.
type inboxCall struct {
	ctx  context.Context
	e    InboxEntry
	res  InboxResult
	err  error
	done chan struct{}
}

// flushInbox records queued calls, one transaction per group, until the
// queue is empty. A call that found fewer than maxInboxFlushers running
// starts it on a goroutine; the calls themselves only wait for their
// answers, so each returns as soon as its own row is in (or its ctx ends),
// whatever the flusher goes on to record for the calls that gathered
// meanwhile.
func (s *Store) flushInbox() {
	g := &s.inbox
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxInboxGroup)
		if n == 0 {
			g.flushers--
			g.mu.Unlock()
			return
		}
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		s.insertInboxGroup(group)
	}
}

// insertInboxGroup records group in one transaction, or each call on its
// own when Postgres refused the group's statement, and answers every call.
func (s *Store) insertInboxGroup(group []*inboxCall) {
	live := group[:0:0]
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("insert inbox %s/%s: %w", c.e.Consumer, c.e.MessageID, err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return // every caller gave up: nothing to record
	}
	if len(live) > 1 || live[0].e.Payment != nil || live[0].e.Refund != nil {
		err := s.insertInboxTogether(live)
		if err == nil {
			return
		}
		// Only a statement Postgres refused (a bad row, a deadlock) is worth
		// running call by call; when Postgres could not be reached, each
		// call would only wait to fail the same way.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			for _, c := range live {
				c.err = err
				close(c.done)
			}
			return
		}
	}
	for _, c := range live {
		c.res, c.err = s.insertInboxOne(c.ctx, c.e)
		close(c.done)
	}
}

// inboxInsert is the insert-or-count statement of a call alone. It also
// turns synchronous commit off when nothing was inserted: a copy only
// bumps the row's duplicates counter, and that commit need not wait for
// the WAL flush (set_config(…, true) lasts until the transaction ends). A
// crash can then lose the last few milliseconds of counts, never a row; a
// new row commits durably before the caller acks the message.
const inboxInsert = `
		WITH ins AS (
			INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING state, payload_sha256, coalesce(workflow_id, '') AS workflow_id
		), async AS (
			SELECT set_config('synchronous_commit', 'off', true) WHERE NOT EXISTS (SELECT 1 FROM ins)
		), dup AS (
			UPDATE inbox SET duplicates = duplicates + 1
			 WHERE consumer = $1 AND message_id = $2 AND NOT EXISTS (SELECT 1 FROM ins) AND EXISTS (SELECT 1 FROM async)
			RETURNING state, payload_sha256, coalesce(workflow_id, '') AS workflow_id
		)
		SELECT true, state, payload_sha256, workflow_id FROM ins
		UNION ALL
		SELECT false, state, payload_sha256, workflow_id FROM dup`

// inboxGroupAsync ends a group's transaction: synchronous commit goes off
// only when none of the group's rows was inserted by it. A row it inserted
// has received_at = now(), the transaction's start; a row recorded before
// has an earlier one (an equal one would only keep the commit synchronous).
const inboxGroupAsync = `
		SELECT set_config('synchronous_commit', 'off', true)
		 WHERE NOT EXISTS (
			SELECT 1 FROM inbox
			 WHERE (consumer, message_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
			   AND received_at = now())`

// insertInboxOne records e in a transaction of its own, claiming no
// payment and no refund: the fallback of a group that failed, whose
// entries' effects the activities claim.
func (s *Store) insertInboxOne(ctx context.Context, e InboxEntry) (InboxResult, error) {
	// A concurrent insert of the same key can commit after this statement's
	// snapshot was taken, leaving both branches empty: run it again, and the
	// second run sees the committed row.
	for range 3 {
		var r InboxResult
		err := s.pool.QueryRow(ctx, inboxInsert, e.Consumer, e.MessageID, e.Payload, e.PayloadHash, e.Source).
			Scan(&r.Inserted, &r.State, &r.PayloadHash, &r.WorkflowID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return InboxResult{}, fmt.Errorf("insert inbox %s/%s: %w", e.Consumer, e.MessageID, translate(err))
		}
		return r, nil
	}
	return InboxResult{}, fmt.Errorf("insert inbox %s/%s: row neither inserted nor found", e.Consumer, e.MessageID)
}

// inboxGroupInsert records a group in one statement: each message ID once,
// with the payload of its first copy in the group (ord, the calls' order)
// and the group's other copies already counted, and for a row already
// there, the group's copies added to its counter, and the payments and
// refunds of the rows it inserted claimed (inboxGroupClaims,
// inboxGroupRefunds). It returns one row per message ID: inserted or not,
// the row's state and first payload hash, the claim (0 for none) and its
// time, and a claimed refund's currency and PaymentIntent.
// A message ID it returns no row for met another transaction's insert that
// committed after this statement's snapshot, and changed nothing.
const inboxGroupInsert = `
		WITH input AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[],
			                     $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[]) WITH ORDINALITY
			    AS t(consumer, message_id, payload, payload_sha256, source, claim, order_id, amount, currency, reason, key, request_sha256, ord)
		), firsts AS (
			SELECT DISTINCT ON (consumer, message_id) consumer, message_id, payload, payload_sha256, source,
			       claim, order_id, amount, currency, reason, key, request_sha256,
			       count(*) OVER (PARTITION BY consumer, message_id) AS n
			  FROM input
			 ORDER BY consumer, message_id, ord
		), ins AS (
			INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source, duplicates)
			SELECT consumer, message_id, payload, payload_sha256, source, n - 1 FROM firsts ORDER BY consumer, message_id
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING consumer, message_id, state, payload_sha256, coalesce(workflow_id, '') AS workflow_id
		), dup AS (
			UPDATE inbox i SET duplicates = i.duplicates + f.n
			  FROM firsts f
			 WHERE i.consumer = f.consumer AND i.message_id = f.message_id
			   AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.consumer = f.consumer AND ins.message_id = f.message_id)
			RETURNING i.consumer, i.message_id, i.state, i.payload_sha256, coalesce(i.workflow_id, '') AS workflow_id
		)` + inboxGroupClaims + inboxGroupRefunds + `
		SELECT true, ins.consumer, ins.message_id, state, payload_sha256, workflow_id,
		       coalesce(eff.claim, reff.claim, 0), coalesce(eff.created_at, reff.created_at),
		       coalesce(rv.currency, ''), coalesce(rv.payment_intent_id, '')
		  FROM ins LEFT JOIN eff ON eff.consumer = ins.consumer AND eff.message_id = ins.message_id
		  LEFT JOIN reff ON reff.consumer = ins.consumer AND reff.message_id = ins.message_id
		  LEFT JOIN reserved rv ON rv.consumer = ins.consumer AND rv.message_id = ins.message_id
		UNION ALL
		SELECT false, consumer, message_id, state, payload_sha256, workflow_id, 0, NULL, '', '' FROM dup`

// Claims an inbox group's entry carries ($6).
const (
	inboxClaimNone    = ""
	inboxClaimPayment = "payment"
	inboxClaimRefund  = "refund"
)

// inboxGroupClaims follows inboxGroupInsert's CTEs: the payments of the
// rows it inserted whose first copy carries one ($6 'payment'; $7 order
// IDs, $8 amounts, $9 currencies, $11 keys, $12 request hashes), claimed as
// ClaimPayment's first claim does: the order unless it exists, the payment
// unless the order or the message has one (of two messages of one order in
// a group, one; the other's activity finds a business duplicate), and only
// then the ledger row under claim 1. Orders in ID order, so that two groups
// lock them in the same order.
const inboxGroupClaims = `, claims AS (
			SELECT f.consumer, f.message_id, f.order_id, f.amount, f.currency, f.key, f.request_sha256
			  FROM firsts f JOIN ins ON ins.consumer = f.consumer AND ins.message_id = f.message_id
			 WHERE f.claim = '` + inboxClaimPayment + `'
		), ord AS (
			INSERT INTO orders (id, amount, currency, message_id)
			SELECT order_id, amount, currency, message_id FROM claims ORDER BY order_id
			ON CONFLICT (id) DO NOTHING
		), pay AS (
			INSERT INTO payments (order_id, consumer, message_id, idempotency_key, amount, currency)
			SELECT order_id, consumer, message_id, key, amount, currency FROM claims ORDER BY order_id
			ON CONFLICT DO NOTHING
			RETURNING consumer, message_id, idempotency_key
		), eff AS (
			INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
			SELECT p.idempotency_key, '` + string(KindPayment) + `', p.consumer, p.message_id, c.request_sha256, '` + string(StateClaimed) + `', 1
			  FROM pay p JOIN claims c ON c.consumer = p.consumer AND c.message_id = p.message_id
			ON CONFLICT (key) DO NOTHING
			RETURNING consumer, message_id, claim, created_at
		)`

// inboxGroupRefunds follows inboxGroupClaims: the refunds of the rows it
// inserted whose first copy carries one ($6 'refund'; $7 order IDs, $8
// amounts, $10 reasons, $11 keys, $12 request hashes), claimed as
// ClaimRefund's first claim does (reserveRefundSQL), and only where nothing
// of the message's refund is recorded (no refunds row, processed row or
// ledger row): the amount added to the payment's refunded_amount only where
// the payment succeeded and the amount fits (the WHERE decides, re-read on
// the locked row; the CHECK backs it), and only then the refunds row and
// the ledger row under claim 1. The payments are locked first in order ID
// order (rlocked, whose rows alone the UPDATE may change), so that two
// groups lock them in the same order; the ledger and refunds rows are new,
// so no other transaction holds them (an insert of the same key meanwhile
// fails the statement, below). One refund per order in a group, the first
// by message ID: an UPDATE changes a row once. The three go together or
// not at all: the inserts take no ON CONFLICT, so a row that appeared
// meanwhile fails the statement, and the group runs again call by call,
// claiming nothing.
const inboxGroupRefunds = `, rclaims AS (
			SELECT DISTINCT ON (f.order_id) f.consumer, f.message_id, f.order_id, f.amount, f.reason, f.key, f.request_sha256
			  FROM firsts f JOIN ins ON ins.consumer = f.consumer AND ins.message_id = f.message_id
			 WHERE f.claim = '` + inboxClaimRefund + `'
			   AND NOT EXISTS (SELECT FROM refunds r WHERE r.consumer = f.consumer AND r.message_id = f.message_id)
			   AND NOT EXISTS (SELECT FROM processed_messages pm WHERE pm.consumer = f.consumer AND pm.message_id = f.message_id)
			   AND NOT EXISTS (SELECT FROM effects e WHERE e.key = f.key)
			 ORDER BY f.order_id, f.consumer, f.message_id
		), rlocked AS (
			SELECT p.order_id FROM payments p
			 WHERE p.order_id IN (SELECT order_id FROM rclaims)
			 ORDER BY p.order_id
			   FOR UPDATE
		), reserved AS (
			UPDATE payments p SET refunded_amount = p.refunded_amount + c.amount
			  FROM rclaims c
			 WHERE p.order_id = c.order_id AND p.order_id IN (SELECT order_id FROM rlocked) AND p.state = '` + string(PaymentSucceeded) + `' AND p.refunded_amount + c.amount <= p.amount
			RETURNING c.consumer, c.message_id, c.order_id, c.key, c.amount, c.reason, c.request_sha256,
			          p.currency, coalesce(p.payment_intent_id, '') AS payment_intent_id
		), rins AS (
			INSERT INTO refunds (consumer, message_id, order_id, idempotency_key, amount, currency, reason, payment_intent_id)
			SELECT consumer, message_id, order_id, key, amount, currency, reason, payment_intent_id FROM reserved ORDER BY order_id
		), reff AS (
			INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
			SELECT key, '` + string(KindRefund) + `', consumer, message_id, request_sha256, '` + string(StateClaimed) + `', 1 FROM reserved ORDER BY key
			RETURNING consumer, message_id, claim, created_at
		)`

// insertInboxTogether records calls in one transaction: one pipelined
// batch (statements sent before a single Sync run as one implicit
// transaction) of inboxGroupInsert and inboxGroupAsync, the rows in key
// order so that two processes' groups insert in the same order. It answers
// the calls and returns nil once the batch committed, and answers none
// when it did not. Of the calls for one message ID, the first (in the
// order they came) inserted the row when the statement did; the others
// are copies. A call whose message ID came back with no row runs again on
// its own after the commit, and then sees the row.
func (s *Store) insertInboxTogether(calls []*inboxCall) error {
	calls = slices.Clone(calls)
	slices.SortStableFunc(calls, func(a, b *inboxCall) int {
		return cmp.Or(cmp.Compare(a.e.Consumer, b.e.Consumer), cmp.Compare(a.e.MessageID, b.e.MessageID))
	})
	// The batch outlives a caller that gives up: the others still want it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(calls[0].ctx), inboxGroupTimeout)
	defer cancel()
	n := len(calls)
	consumers, ids, hashes, sources := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payloads := make([][]byte, n)
	claims, orders, amounts := make([]string, n), make([]int64, n), make([]int64, n)
	currencies, reasons, keys, requests := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, c := range calls {
		consumers[i], ids[i], payloads[i], hashes[i], sources[i] = c.e.Consumer, c.e.MessageID, c.e.Payload, c.e.PayloadHash, c.e.Source
		switch p, r := c.e.Payment, c.e.Refund; {
		case p != nil:
			claims[i], orders[i], amounts[i], currencies[i], keys[i], requests[i] = inboxClaimPayment, p.OrderID, p.Amount, p.Currency, p.Key, p.RequestHash
		case r != nil:
			claims[i], orders[i], amounts[i], reasons[i], keys[i], requests[i] = inboxClaimRefund, r.OrderID, r.Amount, r.Reason, r.Key, r.RequestHash
		default:
			claims[i] = inboxClaimNone
		}
	}
	type key struct{ consumer, messageID string }
	rows := make(map[key]InboxResult, n)
	var b pgx.Batch
	b.Queue(inboxGroupInsert, consumers, ids, payloads, hashes, sources, claims, orders, amounts, currencies, reasons, keys, requests).Query(func(rs pgx.Rows) error {
		for rs.Next() {
			var k key
			var r InboxResult
			var claimedAt *time.Time
			if err := rs.Scan(&r.Inserted, &k.consumer, &k.messageID, &r.State, &r.PayloadHash, &r.WorkflowID, &r.Claim, &claimedAt, &r.Currency, &r.PaymentIntentID); err != nil {
				return err
			}
			if claimedAt != nil {
				r.ClaimedAt = *claimedAt
			}
			rows[k] = r
		}
		return rs.Err()
	})
	b.Queue(inboxGroupAsync, consumers, ids)
	if err := s.pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("insert %d inbox rows: %w", n, translate(err))
	}
	for _, c := range calls {
		k := key{c.e.Consumer, c.e.MessageID}
		r, ok := rows[k]
		if !ok {
			c.res, c.err = s.insertInboxOne(c.ctx, c.e)
			close(c.done)
			continue
		}
		c.res = r
		// The next calls for this ID are its copies: they claimed nothing.
		r.Inserted, r.Claim, r.ClaimedAt, r.Currency, r.PaymentIntentID = false, 0, time.Time{}, "", ""
		rows[k] = r
		close(c.done)
	}
	return nil
}

// inboxGroupTimeout bounds one group's transaction.
const inboxGroupTimeout = 30 * time.Second

// InboxHas reports whether the inbox holds a row of consumer's messageID.
func (s *Store) InboxHas(ctx context.Context, consumer, messageID string) (bool, error) {
	var has bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox WHERE consumer = $1 AND message_id = $2)`, consumer, messageID).Scan(&has)
	if err != nil {
		return false, fmt.Errorf("inbox row of %s %q: %w", consumer, messageID, translate(err))
	}
	return has, nil
}

// MarkDispatched records that the message's workflow was started (or found
// already started).
func (s *Store) MarkDispatched(ctx context.Context, consumer, messageID, workflowID string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE inbox SET state = 'dispatched', workflow_id = $3, dispatched_at = coalesce(dispatched_at, now())
		 WHERE consumer = $1 AND message_id = $2`, consumer, messageID, workflowID)
	if err != nil {
		return fmt.Errorf("mark %s/%s dispatched: %w", consumer, messageID, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark %s/%s dispatched: %w", consumer, messageID, ErrNotFound)
	}
	return nil
}

// InboxRow is an inbox row as an operator sees it.
type InboxRow struct {
	Consumer     string     `json:"consumer"`
	MessageID    string     `json:"message_id"`
	PayloadHash  string     `json:"payload_sha256"`
	Source       string     `json:"source"`
	State        InboxState `json:"state"`
	WorkflowID   string     `json:"workflow_id,omitempty"`
	ReceivedAt   time.Time  `json:"received_at"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	Duplicates   int        `json:"duplicates"`
	Payload      []byte     `json:"-"`
}
