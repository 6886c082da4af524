package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CommitEvery spaces the drain's commit probe: a one-row UPDATE on each of
// two connections of its own, one committing synchronously (waiting for
// the WAL's flush, as the inbox rows, the claims and the records do) and
// one asynchronously (as the limiter's reservations do, migration 00019).
// When only the first is slow, the flush (fdatasync) was, not the CPU or a
// lock: a quiet route's probe that overlaps such a moment waits for it in
// each of its own commits, whatever the worker does.
const CommitEvery = 200 * time.Millisecond

// CommitStall is a synchronous commit slow enough to count as a stall:
// about ten times their median on an idle machine here (1–2 ms).
const CommitStall = 20 * time.Millisecond

// commitSample is one timed commit.
type commitSample struct {
	at   time.Time
	took time.Duration
	sync bool
}

// commitProbe times commits until stopped (startCommitProbe).
type commitProbe struct {
	mu      sync.Mutex
	samples []commitSample
}

// startCommitProbe times a commit of each kind every CommitEvery on the
// pool's database (table lab_commit_probe, created here) until stop,
// which returns the first error.
func startCommitProbe(ctx context.Context, pool *pgxpool.Pool) (*commitProbe, func() error, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lab_commit_probe (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
		INSERT INTO lab_commit_probe (id) VALUES (1), (2) ON CONFLICT DO NOTHING`); err != nil {
		return nil, nil, fmt.Errorf("commit probe: %w", err)
	}
	c := &commitProbe{}
	ctx, cancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for _, synchronous := range []bool{true, false} {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, nil, fmt.Errorf("commit probe: %w", err)
		}
		wg.Go(func() {
			defer conn.Release()
			errs <- c.run(ctx, conn, synchronous)
		})
	}
	stop := func() error {
		cancel()
		wg.Wait()
		return errors.Join(<-errs, <-errs)
	}
	return c, stop, nil
}

// run commits on conn every CommitEvery until ctx ends; nil then.
func (c *commitProbe) run(ctx context.Context, conn *pgxpool.Conn, synchronous bool) error {
	id, mode := 1, "on"
	if !synchronous {
		id, mode = 2, "off"
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = "+mode); err != nil {
		return fmt.Errorf("commit probe: %w", err)
	}
	t := time.NewTicker(CommitEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		at := time.Now()
		if _, err := conn.Exec(ctx, `UPDATE lab_commit_probe SET n = n + 1 WHERE id = $1`, id); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("commit probe: %w", err)
		}
		c.mu.Lock()
		c.samples = append(c.samples, commitSample{at: at, took: time.Since(at), sync: synchronous})
		c.mu.Unlock()
	}
}

// CommitStats are a window's commit probe figures.
type CommitStats struct {
	// Sync and Async count the commits of each kind.
	Sync  int `json:"sync"`
	Async int `json:"async"`
	// SyncP50, SyncP99 and SyncMax are the synchronous commits' latencies,
	// AsyncP99 and AsyncMax the asynchronous ones'.
	SyncP50  time.Duration `json:"sync_p50"`
	SyncP99  time.Duration `json:"sync_p99"`
	SyncMax  time.Duration `json:"sync_max"`
	AsyncP99 time.Duration `json:"async_p99"`
	AsyncMax time.Duration `json:"async_max"`
	// Stalls counts the synchronous commits of CommitStall or more.
	Stalls int `json:"stalls"`
}

func (s CommitStats) String() string {
	if s.Sync == 0 {
		return "none timed"
	}
	return fmt.Sprintf("synchronous p50 %s, p99 %s, longest %s (%d of %d at %s or more); asynchronous p99 %s, longest %s",
		s.SyncP50.Round(100*time.Microsecond), s.SyncP99.Round(100*time.Microsecond), s.SyncMax.Round(100*time.Microsecond),
		s.Stalls, s.Sync, CommitStall, s.AsyncP99.Round(100*time.Microsecond), s.AsyncMax.Round(100*time.Microsecond))
}

// stats is the figures of the commits that began in [from, to).
func (c *commitProbe) stats(from, to time.Time) CommitStats {
	if c == nil {
		return CommitStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var syncs, asyncs []time.Duration
	var s CommitStats
	for _, x := range c.samples {
		if x.at.Before(from) || !x.at.Before(to) {
			continue
		}
		if x.sync {
			syncs = append(syncs, x.took)
			if x.took >= CommitStall {
				s.Stalls++
			}
		} else {
			asyncs = append(asyncs, x.took)
		}
	}
	s.Sync, s.Async = len(syncs), len(asyncs)
	s.SyncP50, s.SyncP99, s.AsyncP99 = p50(syncs), p99(syncs), p99(asyncs)
	if len(syncs) > 0 {
		s.SyncMax = slices.Max(syncs)
	}
	if len(asyncs) > 0 {
		s.AsyncMax = slices.Max(asyncs)
	}
	return s
}

// worst is the longest synchronous commit that overlapped [from, to]: how
// long a commit of a probe that ran then could have waited for the flush.
func (c *commitProbe) worst(from, to time.Time) time.Duration {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var w time.Duration
	for _, x := range c.samples {
		if x.sync && !x.at.After(to) && !x.at.Add(x.took).Before(from) {
			w = max(w, x.took)
		}
	}
	return w
}

// markStalls sets l.commit: for each probe, the longest synchronous commit
// that overlapped it, from its publication to its record.
func (c *commitProbe) markStalls(l *latencies) {
	if c == nil || len(l.sent) != len(l.total) {
		return
	}
	l.commit = make([]time.Duration, len(l.total))
	for i, at := range l.sent {
		l.commit[i] = c.worst(at, at.Add(l.total[i]))
	}
}

// stalled counts l's probes slower than over, and how many of them
// overlapped a synchronous commit of CommitStall or more.
func (l latencies) stalled(over time.Duration) (slow, stalled int) {
	for i, t := range l.total {
		if t <= over {
			continue
		}
		slow++
		if len(l.commit) == len(l.total) && l.commit[i] >= CommitStall {
			stalled++
		}
	}
	return slow, stalled
}
