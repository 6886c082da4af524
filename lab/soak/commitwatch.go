package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// commitWatch notes when each refund probe's records became visible, that
// is committed: Postgres stamps processed_at with its statement's start,
// before the record's own run and its WAL flush, and a refund's receipt is
// recorded after the refund. A trigger (installed in the stack's database
// for the drain) sends a NOTIFY for the refund route's processed row and
// for its receipt's settled ledger row; Postgres delivers a notification
// only when its transaction commits, and a connection of the drain's own
// LISTENs and notes when each arrives. Idle and busy probes are timed the
// same way.
type commitWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time // "p <message id>" (processed), "r <message id>" (receipt)
}

// watchCommitsSQL installs the NOTIFY triggers (idempotent).
const watchCommitsSQL = `
CREATE OR REPLACE FUNCTION drain_probe_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_TABLE_NAME = 'processed_messages' THEN
		PERFORM pg_notify('drain_probe_done', 'p ' || NEW.message_id);
	ELSE
		PERFORM pg_notify('drain_probe_done', 'r ' || NEW.message_id);
	END IF;
	RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS drain_probe_done ON processed_messages;
CREATE TRIGGER drain_probe_done AFTER INSERT ON processed_messages
	FOR EACH ROW WHEN (NEW.consumer = 'order-refund') EXECUTE FUNCTION drain_probe_done();
DROP TRIGGER IF EXISTS drain_probe_receipt ON effects;
CREATE TRIGGER drain_probe_receipt AFTER INSERT OR UPDATE OF state ON effects
	FOR EACH ROW WHEN (NEW.consumer = 'order-refund' AND NEW.kind = 'email' AND NEW.state = 'succeeded')
	EXECUTE FUNCTION drain_probe_done();`

// watchCommits installs the triggers and listens until stop is called.
func watchCommits(ctx context.Context, pool *pgxpool.Pool) (w *commitWatch, stop func(), err error) {
	if _, err := pool.Exec(ctx, watchCommitsSQL); err != nil {
		return nil, nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN drain_probe_done`); err != nil {
		conn.Release()
		return nil, nil, err
	}
	w = &commitWatch{seen: map[string]time.Time{}}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.Conn().WaitForNotification(lctx)
			if err != nil {
				return
			}
			at := time.Now()
			w.mu.Lock()
			if _, ok := w.seen[n.Payload]; !ok {
				w.seen[n.Payload] = at
			}
			w.mu.Unlock()
		}
	}()
	return w, func() {
		cancel()
		<-done
		// The wait was cut mid-read: the connection is not reused.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}, nil
}

// committed returns when message id's processed row and its receipt were
// committed (receipt zero when not seen).
func (w *commitWatch) committed(id string) (processed, receipt time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	processed, ok = w.seen["p "+id]
	return processed, w.seen["r "+id], ok
}

// await waits until every id's processed row and receipt were seen, or
// for bound: a probe whose receipt never settles (refused) ends at its
// processed row.
func (w *commitWatch) await(ctx context.Context, ids []string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		missing := 0
		w.mu.Lock()
		for _, id := range ids {
			_, p := w.seen["p "+id]
			_, r := w.seen["r "+id]
			if !p || !r {
				missing++
			}
		}
		w.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the probes' commits: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
