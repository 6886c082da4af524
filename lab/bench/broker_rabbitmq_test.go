package bench

import (
	"context"
	"testing"
	"time"

	"github.com/effectively/effectively/tools/rabbittest"
)

// TestRabbitBrokerDeclaresAndRemoves: the bench's RabbitMQ broker declares
// its queues (bounded), reports no consumer before a worker subscribes,
// and removes every queue when closed.
func TestRabbitBrokerDeclaresAndRemoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := newRabbitBroker(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close) // a second Close does nothing
	queues := []string{b.cfg.Queue, b.cfg.Queue + ".dead", b.events.Queue}
	conn := rabbittest.Dial(t, rabbittest.URL())
	declared := func(q string) bool {
		// A passive declare of a missing queue closes its channel: one
		// channel each.
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}
	for _, q := range queues {
		if !declared(q) {
			t.Fatalf("queue %s not declared", q)
		}
	}
	if b.Subscribed(ctx) {
		t.Error("Subscribed before any worker consumed")
	}
	b.Close()
	for _, q := range queues {
		if declared(q) {
			t.Errorf("queue %s left after Close", q)
		}
	}
}
