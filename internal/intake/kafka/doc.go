// Package kafka consumes a Kafka topic into the inbox, with franz-go.
//
// Kafka has no per-record acknowledgement: a consumer group commits, per
// partition, the offset to resume from, and that commit covers every record
// before it. The consumer therefore commits only the contiguous prefix of
// each partition whose records are settled — recorded in the inbox, or
// quarantined — however the concurrent inbox commits finish (a tracker, not
// kgo's MarkCommitRecords per record, which would move the watermark past
// records still in flight).
//
// Kafka has no delivery count and no nack either. A record the inbox cannot
// take because Postgres is unreachable is never skipped: its partition is
// read again from that record after a growing pause, for as long as it
// takes. A record that can never be recorded (undecodable, over the size
// limit, an unknown type after a few stalls) is quarantined with its reason,
// and only then is the commit moved past it. The decision is the shared
// intake.Path's; this package turns its verdicts into marks and stalls.
//
// Polls block rebalances (BlockRebalanceOnPoll) until the bounded batch is
// settled and marked; marks are committed when partitions are revoked,
// never when they are lost (another member may own them already), and on
// shutdown. A record read again by the partition's next owner is a copy the
// inbox recognises.
//
// The redelivery horizon of a topic is the life of a record in its log,
// retention.ms plus segment.ms (Horizon); a topic that keeps records
// forever or compacts them has none, and is refused.
package kafka
