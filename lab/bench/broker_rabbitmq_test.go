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
	queues := []string{b.cfg.Queue, b.cfg.Queue + ".dead", b.events.Queue}
	ch := rabbittest.Channel(t, rabbittest.URL())
	for _, q := range queues {
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			t.Fatalf("queue %s not declared: %v", q, err)
		}
	}
	if b.Subscribed(ctx) {
		t.Error("Subscribed before any worker consumed")
	}
	b.Close()
	for _, q := range queues {
		// A passive declare of a missing queue closes its channel.
		ch := rabbittest.Channel(t, rabbittest.URL())
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
			t.Errorf("queue %s left after Close", q)
		}
	}
}
