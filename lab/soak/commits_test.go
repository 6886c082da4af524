package soak

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestCommitStallsOverlap: a probe is marked with the longest synchronous
// commit that overlapped it, from its publication to its record, never an
// asynchronous one nor one that ended before or began after it; stalled
// counts the slow probes that met a stall.
func TestCommitStallsOverlap(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c := &commitProbe{samples: []commitSample{
		{at(0), 2 * time.Millisecond, true},
		{at(100), 150 * time.Millisecond, true}, // 100–250 ms
		{at(120), 300 * time.Millisecond, false},
		{at(400), 5 * time.Millisecond, true},  // 400–405 ms
		{at(600), 40 * time.Millisecond, true}, // 600–640 ms
	}}
	l := latencies{
		total: []time.Duration{20 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 10 * time.Millisecond},
		sent:  []time.Time{at(240), at(50), at(300), at(590), at(650)},
	}
	c.markStalls(&l)
	// 240–260 meets the 150 ms commit's end; 50–80 meets the 2 ms commit
	// only (it ended at 2 ms: not); 300–320 meets none; 590–640 meets the
	// 40 ms one; 650–660 comes after it ended.
	want := []time.Duration{150 * time.Millisecond, 0, 0, 40 * time.Millisecond, 0}
	for i, w := range want {
		if l.commit[i] != w {
			t.Errorf("probe %d: commit %s, want %s", i, l.commit[i], w)
		}
	}
	if slow, stalled := l.stalled(15 * time.Millisecond); slow != 4 || stalled != 2 {
		t.Errorf("stalled(15ms) = %d, %d; want 4, 2", slow, stalled)
	}
	if slow, stalled := l.stalled(25 * time.Millisecond); slow != 2 || stalled != 1 {
		t.Errorf("stalled(25ms) = %d, %d; want 2, 1", slow, stalled)
	}
	// keep carries the marks, and five shows them.
	if k := l.keep([]int{3}); len(k.commit) != 1 || k.commit[0] != 40*time.Millisecond {
		t.Errorf("keep: commit %v, want [40ms]", k.commit)
	}
	l.sentAt = make([]time.Duration, len(l.total))
	if five := l.five(); !strings.Contains(five, "50ms at 0s [a commit meanwhile 40ms], 30ms at 0s, ") {
		t.Errorf("five = %q", five)
	}

	s := c.stats(at(0), at(600))
	if s.Sync != 3 || s.Async != 1 || s.Stalls != 1 || s.SyncMax != 150*time.Millisecond || s.AsyncMax != 300*time.Millisecond {
		t.Errorf("stats [0, 600ms) = %+v", s)
	}
	if s := c.stats(at(600), at(700)); s.Sync != 1 || s.Stalls != 1 || s.Async != 0 {
		t.Errorf("stats [600, 700ms) = %+v", s)
	}
}

// TestCommitProbe times both kinds of commit on a real database until
// stopped, and stops cleanly.
func TestCommitProbe(t *testing.T) {
	ctx := context.Background()
	pool, err := store.Open(ctx, storetest.NewDatabase(t), store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	from := time.Now()
	c, stop, err := startCommitProbe(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	// Until 3 of each kind are timed (5 ticks' time when idle), not a fixed
	// sleep that a busy machine could outrun.
	deadline := time.Now().Add(10 * time.Second)
	for s := c.stats(from, time.Now()); (s.Sync < 3 || s.Async < 3) && time.Now().Before(deadline); s = c.stats(from, time.Now()) {
		time.Sleep(CommitEvery)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := c.stats(from, time.Now())
	if s.Sync < 3 || s.Async < 3 {
		t.Fatalf("stats after %s: %+v, want at least 3 of each kind", time.Since(from).Round(time.Millisecond), s)
	}
	var n1, n2 int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT n FROM lab_commit_probe WHERE id = 1), (SELECT n FROM lab_commit_probe WHERE id = 2)`).Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	// A commit cut off by stop may have landed untimed.
	if n1-int64(s.Sync) > 1 || n1 < int64(s.Sync) || n2-int64(s.Async) > 1 || n2 < int64(s.Async) {
		t.Errorf("rows counted %d and %d commits, the probe %d and %d", n1, n2, s.Sync, s.Async)
	}
	if !strings.Contains(s.String(), "synchronous p50") {
		t.Errorf("String = %q", s.String())
	}
}
