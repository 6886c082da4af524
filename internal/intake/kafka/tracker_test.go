package kafka

import (
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTrackerMarksOnlyTheContiguousPrefix(t *testing.T) {
	tr := newTracker()
	p := partition{"orders", 0}
	q := partition{"orders", 1}
	for _, off := range []int64{10, 11, 12, 14, 15} { // 13: a transaction marker, never handed out
		if err := tr.add(p, off, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.add(q, 7, 1); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		done int64
		want int64 // p's watermark after it; -1: unmoved
	}{
		{12, -1}, // out of order: 10 and 11 still open
		{15, -1},
		{10, 11},
		{14, -1}, // 11 still open
		{11, 16}, // the whole run settles at once, past the gap at 13
	}
	for _, s := range steps {
		if err := tr.done(p, s.done); err != nil {
			t.Fatal(err)
		}
		m := tr.marks()
		got, moved := m["orders"][0]
		switch {
		case s.want < 0 && moved:
			t.Fatalf("after %d: watermark moved to %d, want it unmoved", s.done, got.Offset)
		case s.want >= 0 && (!moved || got.Offset != s.want || got.Epoch != 3):
			t.Fatalf("after %d: marks %v, want offset %d epoch 3", s.done, m, s.want)
		}
		if _, ok := m["orders"][1]; ok {
			t.Fatalf("partition 1 marked with its only record open: %v", m)
		}
	}
	if n := tr.outstanding(p); n != 0 {
		t.Fatalf("%d records outstanding after all settled", n)
	}
	if off, ok := tr.firstUnsettled(q); !ok || off.Offset != 7 {
		t.Fatalf("first unsettled of partition 1 = %v %v, want 7", off, ok)
	}
}

func TestTrackerRefusesWhatItWasNotGiven(t *testing.T) {
	tr := newTracker()
	p := partition{"orders", 0}
	if err := tr.done(p, 1); err == nil {
		t.Fatal("settling a record of an unknown partition: no error")
	}
	if err := tr.add(p, 5, 0); err != nil {
		t.Fatal(err)
	}
	if err := tr.add(p, 5, 0); err == nil {
		t.Fatal("offset 5 added twice: no error")
	}
	if err := tr.add(p, 4, 0); err == nil {
		t.Fatal("offset 4 added after 5: no error")
	}
	if err := tr.done(p, 6); err == nil {
		t.Fatal("settling offset 6, never handed out: no error")
	}
	if err := tr.done(p, 5); err != nil {
		t.Fatal(err)
	}
	if err := tr.add(p, 3, 0); err == nil {
		t.Fatal("offset 3 added below the watermark 6: no error")
	}
}

// Whatever order completions arrive in, the watermark never passes an
// unsettled record and ends just past the last one.
func TestTrackerRandomOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1)) //nolint:gosec // a reproducible order, not a secret
		tr := newTracker()
		p := partition{"t", 2}
		n := 1 + rng.IntN(60)
		offsets := make([]int64, n)
		off := int64(rng.IntN(1000))
		for i := range offsets {
			off += 1 + int64(rng.IntN(3))
			offsets[i] = off
			if err := tr.add(p, off, 0); err != nil {
				t.Fatal(err)
			}
		}
		settled := make(map[int64]bool)
		var mark kgo.EpochOffset
		for _, i := range rng.Perm(n) {
			if err := tr.done(p, offsets[i]); err != nil {
				t.Fatal(err)
			}
			settled[offsets[i]] = true
			if m, ok := tr.marks()["t"][2]; ok {
				if m.Offset <= mark.Offset {
					t.Fatalf("seed %d: watermark went from %d to %d", seed, mark.Offset, m.Offset)
				}
				mark = m
			}
			for _, o := range offsets {
				if o < mark.Offset && !settled[o] {
					t.Fatalf("seed %d: watermark %d passed unsettled offset %d", seed, mark.Offset, o)
				}
			}
		}
		if mark.Offset != offsets[n-1]+1 {
			t.Fatalf("seed %d: final watermark %d, want %d", seed, mark.Offset, offsets[n-1]+1)
		}
	}
}
