package kafka

import (
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tracker follows, per partition, the records handed out and which of them
// are settled (recorded in the inbox, or quarantined), and yields the
// contiguous settled prefix: a Kafka commit is a watermark, so it may only
// move to just past the last record before the first unsettled one. A
// record settled out of offset order waits for the ones before it.
//
// It is not safe for concurrent use: the poll loop owns it.
type tracker struct {
	parts map[partition]*partitionTrack
}

// partition names one topic partition.
type partition struct {
	topic string
	part  int32
}

func (p partition) String() string { return fmt.Sprintf("%s/%d", p.topic, p.part) }

// partitionTrack is one partition's records past its watermark, in offset
// order.
type partitionTrack struct {
	queue []tracked
	// moved is set when the watermark advanced since the last marks call.
	moved bool
	// mark is the watermark: the offset a commit may move to.
	mark kgo.EpochOffset
}

type tracked struct {
	offset int64
	epoch  int32
	done   bool
}

func newTracker() *tracker { return &tracker{parts: make(map[partition]*partitionTrack)} }

// add hands out a record. Records of one partition must be added in offset
// order (as a poll returns them); offsets need not be contiguous
// (compaction, transaction markers).
func (t *tracker) add(p partition, offset int64, epoch int32) error {
	pt := t.parts[p]
	if pt == nil {
		pt = &partitionTrack{mark: kgo.EpochOffset{Epoch: -1, Offset: -1}}
		t.parts[p] = pt
	}
	if n := len(pt.queue); n > 0 && pt.queue[n-1].offset >= offset {
		return fmt.Errorf("partition %s: offset %d added after %d", p, offset, pt.queue[n-1].offset)
	}
	if pt.mark.Offset > offset {
		return fmt.Errorf("partition %s: offset %d added below the watermark %d", p, offset, pt.mark.Offset)
	}
	pt.queue = append(pt.queue, tracked{offset: offset, epoch: epoch})
	return nil
}

// done settles a record handed out by add, and advances the partition's
// watermark over the settled prefix.
func (t *tracker) done(p partition, offset int64) error {
	pt := t.parts[p]
	if pt == nil {
		return fmt.Errorf("partition %s: offset %d settled but never handed out", p, offset)
	}
	i := sort.Search(len(pt.queue), func(i int) bool { return pt.queue[i].offset >= offset })
	if i == len(pt.queue) || pt.queue[i].offset != offset {
		return fmt.Errorf("partition %s: offset %d settled but not outstanding", p, offset)
	}
	pt.queue[i].done = true
	n := 0
	for n < len(pt.queue) && pt.queue[n].done {
		n++
	}
	if n > 0 {
		last := pt.queue[n-1]
		pt.mark = kgo.EpochOffset{Epoch: last.epoch, Offset: last.offset + 1}
		pt.moved = true
		pt.queue = pt.queue[n:]
	}
	return nil
}

// marks returns the watermarks that moved since the last call, in the
// shape kgo's MarkCommitOffsets takes.
func (t *tracker) marks() map[string]map[int32]kgo.EpochOffset {
	var out map[string]map[int32]kgo.EpochOffset
	for p, pt := range t.parts {
		if !pt.moved {
			continue
		}
		pt.moved = false
		if out == nil {
			out = make(map[string]map[int32]kgo.EpochOffset)
		}
		if out[p.topic] == nil {
			out[p.topic] = make(map[int32]kgo.EpochOffset)
		}
		out[p.topic][p.part] = pt.mark
	}
	return out
}

// firstUnsettled is the offset a stalled partition is read again from: its
// first record not settled. ok is false when every record handed out is
// settled.
func (t *tracker) firstUnsettled(p partition) (kgo.EpochOffset, bool) {
	pt := t.parts[p]
	if pt == nil || len(pt.queue) == 0 {
		return kgo.EpochOffset{}, false
	}
	first := pt.queue[0]
	return kgo.EpochOffset{Epoch: first.epoch, Offset: first.offset}, true
}

// outstanding is how many records of p are handed out and not past the
// watermark.
func (t *tracker) outstanding(p partition) int {
	if pt := t.parts[p]; pt != nil {
		return len(pt.queue)
	}
	return 0
}

// forget drops p: it was revoked or lost, or is read again from its first
// unsettled record.
func (t *tracker) forget(p partition) { delete(t.parts, p) }
