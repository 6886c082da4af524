package rabbitmq

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

func (c *Consumer) testHooks() *testHooks {
	if c.hooks == nil {
		c.hooks = &testHooks{}
	}
	return c.hooks
}

// SetAfterRecord makes c run f between a delivery's inbox commit and its ack.
func SetAfterRecord(c *Consumer, f func(*Delivery)) { c.testHooks().afterRecord = f }

// SetLive marks generation gen as the open connection's (0: none).
func SetLive(c *Consumer, gen uint64) { c.live.Store(gen) }

// LoseSettles makes c's acks and rejects vanish while its connection stays
// up: a lost ack, as the broker sees it.
func LoseSettles(c *Consumer) { c.testHooks().dropSettles = true }

// Crashable records c's connections; the returned crash closes them at
// once and refuses every settle after: what the broker sees of a SIGKILL.
func Crashable(c *Consumer) (crash func()) {
	h := c.testHooks()
	var (
		mu    sync.Mutex
		conns []*amqp.Connection
	)
	h.dial = func(url, name string) (*amqp.Connection, error) {
		conn, err := Dial(url, name)
		if err == nil {
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
		return conn, err
	}
	return func() {
		h.crashed.Store(true)
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			_ = conn.Close()
		}
	}
}

// SetDeadLetterRenewAt sets how many returns make a dead letter be
// published again, until the returned func restores it.
func SetDeadLetterRenewAt(n int) (restore func()) {
	prev := deadLetterRenewAt
	deadLetterRenewAt = n
	return func() { deadLetterRenewAt = prev }
}
