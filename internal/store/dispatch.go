package store

import (
	"context"
	"fmt"
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

// Dispatched reports one claimed message whose fate is settled: its workflow
// was started (or found already started) as WorkflowID, or, when WorkflowID
// is empty, it cannot be started at all and was quarantined.
type Dispatched struct {
	Consumer   string
	MessageID  string
	WorkflowID string
}

// DispatchFunc starts the workflows of a claimed batch and returns the
// messages it settled. A message it leaves out stays pending and is claimed
// again by a later pass.
type DispatchFunc func(ctx context.Context, batch []PendingMessage) []Dispatched

// DispatchPending claims up to limit pending inbox rows received at least
// minAge ago, oldest first, calls fn with them and marks the ones fn settled
// as dispatched, all in one transaction. It returns how many were marked.
//
// The rows are locked FOR UPDATE SKIP LOCKED for the whole call, so any
// number of dispatchers, in any number of processes, each get a disjoint
// batch: a row is never handed to two of them at once. A crash after fn
// started a workflow but before the commit leaves the row pending; the next
// pass starts it again, and Temporal's ID policy reports it already started.
func (s *Store) DispatchPending(ctx context.Context, limit int, minAge time.Duration, fn DispatchFunc) (int, error) {
	var n int
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT consumer, message_id, payload, received_at FROM inbox
			 WHERE state = 'pending' AND received_at <= now() - make_interval(secs => $2)
			 ORDER BY received_at
			 LIMIT $1
			 FOR UPDATE SKIP LOCKED`, limit, minAge.Seconds())
		if err != nil {
			return fmt.Errorf("claim pending inbox rows: %w", translate(err))
		}
		batch, err := pgx.CollectRows(rows, scanPending)
		if err != nil {
			return fmt.Errorf("claim pending inbox rows: %w", translate(err))
		}
		if len(batch) == 0 {
			return nil
		}
		n, err = markDispatched(ctx, tx, fn(ctx, batch))
		return err
	})
	return n, err
}

func scanPending(row pgx.CollectableRow) (PendingMessage, error) {
	var p PendingMessage
	err := row.Scan(&p.Consumer, &p.MessageID, &p.Payload, &p.ReceivedAt)
	return p, err
}

// markDispatched marks every row of done dispatched in one statement.
func markDispatched(ctx context.Context, tx pgx.Tx, done []Dispatched) (int, error) {
	if len(done) == 0 {
		return 0, nil
	}
	consumers := make([]string, len(done))
	ids := make([]string, len(done))
	wfIDs := make([]string, len(done))
	for i, d := range done {
		consumers[i], ids[i], wfIDs[i] = d.Consumer, d.MessageID, d.WorkflowID
	}
	tag, err := tx.Exec(ctx, `
		UPDATE inbox AS i
		   SET state = 'dispatched', workflow_id = nullif(d.workflow_id, ''), dispatched_at = coalesce(i.dispatched_at, now())
		  FROM unnest($1::text[], $2::text[], $3::text[]) AS d(consumer, message_id, workflow_id)
		 WHERE i.consumer = d.consumer AND i.message_id = d.message_id`, consumers, ids, wfIDs)
	if err != nil {
		return 0, fmt.Errorf("mark %d inbox rows dispatched: %w", len(done), translate(err))
	}
	return int(tag.RowsAffected()), nil
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
