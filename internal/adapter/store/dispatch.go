package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingMessage is an inbox row whose workflow has not been started yet.
type PendingMessage struct {
	Consumer   string
	MessageID  string
	Payload    []byte
	ReceivedAt time.Time
}

// Dispatched reports one claimed message this pass settled: its workflow
// was started (or found already started) as WorkflowID, or, when WorkflowID
// is empty, this dispatcher cannot start it (its payload does not decode
// here). Such a row stays pending, and no dispatcher claims it again for
// DispatchOptions.Hold.
type Dispatched struct {
	Consumer   string
	MessageID  string
	WorkflowID string
}

// DispatchFunc starts the workflows of a claimed batch and returns the
// messages it settled. A message it leaves out (its start failed) stays
// pending and is claimed again by a later pass.
type DispatchFunc func(ctx context.Context, batch []PendingMessage) []Dispatched

// DispatchOptions says which pending rows DispatchPending claims.
type DispatchOptions struct {
	// Limits[i] is the most rows of Consumers[i] one call claims, each
	// consumer's oldest, so that one consumer's backlog does not fill
	// another's share of the batch.
	Limits []int
	// MinAge leaves rows younger than this alone.
	MinAge time.Duration
	// Consumers are the consumers whose rows the caller can start: a row of
	// any other consumer (a message type added by a newer worker) is never
	// claimed, and stays pending for a worker that knows it.
	Consumers []string
	// Lease is how long a claim keeps other dispatchers off the rows while
	// fn runs. A claim that outlives it only risks a second start, which
	// Temporal refuses as already started.
	Lease time.Duration
	// Hold is how long a row fn could not start (Dispatched with no
	// WorkflowID) is left alone before it is claimed again.
	Hold time.Duration
}

// DispatchPending claims up to o.Limits[i] pending rows of each of
// o.Consumers received at least o.MinAge ago, each consumer's oldest, calls
// fn with them (oldest first), and marks the ones
// fn started as dispatched. It returns how many fn settled.
//
// No row lock is held while fn runs: the claim is a lease (claimed_until)
// taken in one short transaction (FOR UPDATE SKIP LOCKED, so concurrent
// dispatchers get disjoint batches), and the mark is another. A copy's
// duplicate counter, which updates the same row, therefore never waits
// behind a Temporal start. Rows fn left out are released at once; a crash
// leaves them claimed until the lease passes, then a later pass starts them
// again and Temporal's ID policy reports the ones already started.
func (s *Store) DispatchPending(ctx context.Context, o DispatchOptions, fn DispatchFunc) (int, error) {
	if len(o.Limits) != len(o.Consumers) {
		return 0, fmt.Errorf("claim pending inbox rows: %d limits for %d consumers", len(o.Limits), len(o.Consumers))
	}
	if len(o.Consumers) == 0 {
		return 0, nil
	}
	limits := make([]int32, len(o.Limits))
	for i, l := range o.Limits {
		limits[i] = int32(min(max(l, 0), 1<<20))
	}
	rows, err := s.pool.Query(ctx, `
		UPDATE inbox AS i SET claimed_until = now() + make_interval(secs => $4)
		  FROM (SELECT p.consumer, p.message_id
		          FROM unnest($3::text[], $1::int[]) AS r(consumer, lim)
		          CROSS JOIN LATERAL (
		                SELECT consumer, message_id FROM inbox
		                 WHERE state = 'pending' AND received_at <= now() - make_interval(secs => $2)
		                   AND consumer = r.consumer
		                   AND (claimed_until IS NULL OR claimed_until <= now())
		                 ORDER BY received_at
		                 LIMIT r.lim
		                 FOR UPDATE SKIP LOCKED) AS p) AS c
		 WHERE i.consumer = c.consumer AND i.message_id = c.message_id
		RETURNING i.consumer, i.message_id, i.payload, i.received_at`,
		limits, o.MinAge.Seconds(), o.Consumers, o.Lease.Seconds())
	if err != nil {
		return 0, fmt.Errorf("claim pending inbox rows: %w", translate(err))
	}
	batch, err := pgx.CollectRows(rows, scanPending)
	if err != nil {
		return 0, fmt.Errorf("claim pending inbox rows: %w", translate(err))
	}
	if len(batch) == 0 {
		return 0, nil
	}
	slices.SortStableFunc(batch, func(a, b PendingMessage) int { return a.ReceivedAt.Compare(b.ReceivedAt) })
	done := fn(ctx, batch)
	// The marks outlive a cancelled pass: the workflows are started.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return len(done), s.settleClaims(mctx, batch, done, o.Hold)
}

func scanPending(row pgx.CollectableRow) (PendingMessage, error) {
	var p PendingMessage
	err := row.Scan(&p.Consumer, &p.MessageID, &p.Payload, &p.ReceivedAt)
	return p, err
}

// settleClaims ends the claim of every row of batch in one statement: a row
// done with a workflow ID is marked dispatched, one done without is held for
// hold, and the rest are released for the next pass.
func (s *Store) settleClaims(ctx context.Context, batch []PendingMessage, done []Dispatched, hold time.Duration) error {
	type key struct{ consumer, id string }
	wf := make(map[key]string, len(done))
	for _, d := range done {
		wf[key{d.Consumer, d.MessageID}] = d.WorkflowID
	}
	n := len(batch)
	consumers, ids, wfIDs, outcomes := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, p := range batch {
		consumers[i], ids[i] = p.Consumer, p.MessageID
		id, ok := wf[key{p.Consumer, p.MessageID}]
		switch {
		case !ok:
			outcomes[i] = "release"
		case id == "":
			outcomes[i] = "hold"
		default:
			outcomes[i], wfIDs[i] = "mark", id
		}
	}
	_, err := s.pool.Exec(ctx, `
		UPDATE inbox AS i
		   SET state = CASE WHEN d.outcome = 'mark' THEN 'dispatched' ELSE i.state END,
		       workflow_id = CASE WHEN d.outcome = 'mark' THEN d.workflow_id ELSE i.workflow_id END,
		       dispatched_at = CASE WHEN d.outcome = 'mark' THEN coalesce(i.dispatched_at, now()) ELSE i.dispatched_at END,
		       claimed_until = CASE WHEN d.outcome = 'hold' THEN now() + make_interval(secs => $5) END
		  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS d(consumer, message_id, workflow_id, outcome)
		 WHERE i.consumer = d.consumer AND i.message_id = d.message_id`, consumers, ids, wfIDs, outcomes, hold.Seconds())
	if err != nil {
		return fmt.Errorf("settle %d claimed inbox rows: %w", n, translate(err))
	}
	return nil
}

// ReopenUnstarted puts back to pending an inbox row marked dispatched with
// no workflow and no processed row: a message an earlier dispatcher settled
// without starting it (it could not decode it). It reports whether it did.
func (s *Store) ReopenUnstarted(ctx context.Context, consumer, messageID string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE inbox SET state = 'pending', dispatched_at = NULL, claimed_until = NULL
		 WHERE consumer = $1 AND message_id = $2 AND state = 'dispatched' AND workflow_id IS NULL
		   AND NOT EXISTS (SELECT 1 FROM processed_messages p WHERE p.consumer = $1 AND p.message_id = $2)`, consumer, messageID)
	if err != nil {
		return false, fmt.Errorf("reopen %s/%s: %w", consumer, messageID, translate(err))
	}
	return tag.RowsAffected() > 0, nil
}

// InboxCounts returns how many inbox rows are in each state.
func (s *Store) InboxCounts(ctx context.Context) (pending, dispatched int, err error) {
	err = s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'dispatched') FROM inbox`).
		Scan(&pending, &dispatched)
	if err != nil {
		return 0, 0, fmt.Errorf("count inbox rows: %w", translate(err))
	}
	return pending, dispatched, nil
}
