package intake

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
)

func start(consumer, id string) fastStart {
	return fastStart{m: &message.Message{Consumer: consumer, ID: id}}
}

// TestLanesServeConsumersInTurn: a consumer with a backlog queued first
// does not hold back another's start: the lanes are served in turn, each
// in its order; a full lane refuses (its start is left to the Dispatcher)
// without touching the others; closed lanes give out what they hold.
func TestLanesServeConsumersInTurn(t *testing.T) {
	l := newLanes(3, 0, nil)
	for i := range 4 {
		ok := l.push(start("order-placed", fmt.Sprint("o", i)))
		if want := i < 3; ok != want {
			t.Fatalf("push o%d = %v, want %v (a lane holds 3)", i, ok, want)
		}
	}
	if !l.push(start("order-refund", "r0")) || !l.push(start("order-refund", "r1")) {
		t.Fatal("another consumer's lane refused a start: a full lane blocked it")
	}
	l.close()
	if l.push(start("order-refund", "r2")) {
		t.Fatal("closed lanes took a start")
	}
	var got []string
	for {
		s, ok := l.pop()
		if !ok {
			break
		}
		got = append(got, s.m.ID)
	}
	if want := []string{"o0", "r0", "o1", "r1", "o2"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// TestHeldLaneKeepsItsStartsAndWaits: a held route's lane is passed over,
// keeping its starts, so that the other routes' starts go first; with
// every queued lane held, pop waits and takes the held lane's start once
// its hold ends; closed lanes give out held starts too (to be left
// pending). Without the hold, o0 would come first.
func TestHeldLaneKeepsItsStartsAndWaits(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	l := newLanes(3, 0, func(c string) bool { return c == "order-placed" && hold.Load() })
	l.push(start("order-placed", "o0"))
	l.push(start("order-placed", "o1"))
	l.push(start("order-refund", "r0"))
	if s, _ := l.pop(); s.m.ID != "r0" {
		t.Fatalf("popped %s first, want r0 (order-placed is held)", s.m.ID)
	}
	got := make(chan string)
	go func() {
		s, _ := l.pop()
		got <- s.m.ID
	}()
	select {
	case id := <-got:
		t.Fatalf("popped %s while its route was held", id)
	case <-time.After(5 * heldRecheck):
	}
	hold.Store(false)
	select {
	case id := <-got:
		if id != "o0" {
			t.Fatalf("popped %s, want o0", id)
		}
	case <-time.After(time.Second):
		t.Fatal("the lane's start stayed queued after its hold ended")
	}
	hold.Store(true)
	l.close()
	if s, ok := l.pop(); !ok || s.m.ID != "o1" {
		t.Fatalf("closed lanes gave %v, %v; want o1 (held, to be left pending)", s.m, ok)
	}
	if _, ok := l.pop(); ok {
		t.Fatal("closed, empty lanes gave a start")
	}
}

// TestBusyRouteLeavesStartersToTheOthers: a route with perRoute starts
// popped and not done (waiting for its pace, say) is passed over, so that
// another route's start, queued after its backlog, is popped at once; done
// lets the route's next start go.
func TestBusyRouteLeavesStartersToTheOthers(t *testing.T) {
	l := newLanes(10, 2, nil)
	for i := range 5 {
		l.push(start("order-placed", fmt.Sprint("o", i)))
	}
	for _, want := range []string{"o0", "o1"} {
		if s, _ := l.pop(); s.m.ID != want {
			t.Fatalf("popped %s, want %s", s.m.ID, want)
		}
	}
	got := make(chan string, 1)
	go func() {
		s, _ := l.pop()
		got <- s.m.ID
	}()
	select {
	case id := <-got:
		t.Fatalf("popped %s with two of its route's starts not done", id)
	case <-time.After(5 * heldRecheck):
	}
	l.push(start("order-refund", "r0"))
	select {
	case id := <-got:
		if id != "r0" {
			t.Fatalf("popped %s, want r0", id)
		}
	case <-time.After(time.Second):
		t.Fatal("another route's start waited behind a busy route")
	}
	l.done("order-placed")
	if s, _ := l.pop(); s.m.ID != "o2" {
		t.Fatalf("popped %s after a done, want o2", s.m.ID)
	}
}
