package rabbitmq

// SetAfterRecord makes c run f between a delivery's inbox commit and its ack.
func SetAfterRecord(c *Consumer, f func(*Delivery)) { c.afterRecord = f }

// SetLive marks generation gen as the open connection's (0: none).
func SetLive(c *Consumer, gen uint64) { c.live.Store(gen) }
