package intake

import (
	"fmt"
	"slices"
	"testing"

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
	l := newLanes(3)
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
