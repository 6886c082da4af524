// Package rabbitmq is the RabbitMQ source and publisher: a quorum queue
// consumed into the inbox, and publishes with publisher confirms.
//
// The queue is declared with a message TTL (the source's redelivery
// horizon; a queue without one is refused), a delivery limit, a dead-letter
// exchange and the at-least-once dead-letter strategy with reject-publish
// overflow. A delivery is acked only after its inbox commit, with a
// per-channel prefetch (global QoS on a quorum queue closes the connection);
// one that cannot be recorded is held, then rejected with requeue, and on
// its MaxDeliver-th delivery quarantined. The delivery count of each server
// version is read in one function, AttemptsOf. What the broker dead-letters
// is quarantined by DeadLetters.
//
// Connections are never recovered by amqp091: after a loss the consumer
// dials again, with a new channel and a new generation, and refuses to
// settle a delivery of an earlier generation (ErrStale) — the broker has
// requeued it, and its delivery tag may name another message now.
//
// The broker does no publish dedup: every re-publish reaches the inbox as a
// copy, which it recognises by (consumer, message ID).
package rabbitmq
