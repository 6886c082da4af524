package intake

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/effectively/effectively/internal/adapter/health"
	"github.com/effectively/effectively/internal/intake/retention"
)

// Source is one broker subscription the worker runs: JetStream, Kafka,
// RabbitMQ, each in its own package under internal/intake. A source turns
// each broker delivery into a Delivery, hands it to its Path and settles it
// as the Verdict says, in the broker's own terms. The decision, the inbox,
// the fast-path start and the counters are the Path's, shared by all.
type Source interface {
	// Name is unique among the worker's sources: the source label of its
	// metrics, the name of its health check, the source of its inbox and
	// quarantine rows.
	Name() string
	// Run consumes until ctx ends. On shutdown it stops fetching, settles
	// every delivery already fetched, and returns nil; an error means the
	// source cannot run at all.
	Run(ctx context.Context) error
	// Horizon reads, from the broker, how long a copy of a message can
	// still arrive after its first delivery. An error (wrapping
	// retention.ErrNoHorizon when the broker's setting allows copies for
	// ever) refuses the worker's start: no retention would be safe.
	Horizon(ctx context.Context) (retention.SourceHorizon, error)
	// Check is the source's readiness check, named by its Name.
	Check() health.Check
	// Stats returns the source's counters (its Path's).
	Stats() SourceStats
}

// Delivery is one broker delivery of a message, in broker-neutral terms.
type Delivery struct {
	// Raw is the message as published.
	Raw []byte
	// Source is the source's Name (recorded with the inbox or quarantine row).
	Source string
	// Attempt is the broker's delivery count, 1 for the first; 0 where the
	// broker keeps none (Kafka).
	Attempt int
	// Last is true when the broker will not deliver the message again after
	// this one (its delivery limit): a message not recorded now is held
	// and recorded once Postgres takes it, or quarantined when only the
	// quarantine does, and a message of a type this worker does not know is
	// quarantined rather than handed back.
	Last bool
	// Headers carry the publisher's trace context (traceparent); nil for
	// none.
	Headers propagation.TextMapCarrier
	// Received is when the source got the delivery. Zero means now.
	Received time.Time
	// AckWait is how long the broker waits for a settle before it
	// redelivers on its own; 0 for a broker that does not (Kafka, RabbitMQ).
	// It bounds the handling and the delay of a retry.
	AckWait time.Duration
	// Deadline, when set, ends the handling sooner than its own bound: a
	// source that must settle a whole batch by then (Kafka's rebalances
	// wait for it). A delivery not recorded by then is not recorded.
	Deadline time.Time
	// Position says where the broker keeps the message, for logs and the
	// quarantine reason: "stream EFFECTIVELY seq 42", "orders/3@1207".
	Position string
	// Attributes are added to the delivery's span (messaging.system, …).
	Attributes []attribute.KeyValue
	// Settle carries out v in the broker's terms: ack, hand back after
	// v.Delay, or (quarantined) ack or terminate. It is called once per
	// Handle, before the fast-path start. Its error is logged: an ack lost
	// means a redelivery, which the inbox recognises.
	Settle func(ctx context.Context, v Verdict) error
	// KeepAlive, when set, is called while a last delivery is held and its
	// record retried (Postgres down), and while a delivery waits for room
	// (PathConfig.OneRoute), to keep the broker from giving up on it
	// (JetStream's in-progress).
	KeepAlive func()
}

// Settlement is what a source must do with a delivery.
type Settlement string

// Settlements of a delivery, as the Path decides them.
const (
	// SettleAck: the message is in the inbox (new or a copy): ack it.
	SettleAck Settlement = "ack"
	// SettleRetry: not recorded (Postgres unreachable, or a type this
	// worker does not know before the last delivery): hand it back to be
	// delivered again after Verdict.Delay. A broker without a nack (Kafka)
	// stalls the partition and retries it in place.
	SettleRetry Settlement = "retry"
	// SettleQuarantined: the Path has written the message's quarantine row
	// (it can never be recorded, or its last delivery could not be): ack it
	// (JetStream terminates a max-deliver one), never hand it back.
	SettleQuarantined Settlement = "quarantined"
)

// Verdict is the Path's decision about one delivery.
type Verdict struct {
	Settle Settlement
	// Delay is the wait before the redelivery of a SettleRetry.
	Delay time.Duration
	// Result is what became of the message (empty for a retry).
	Result Result
	// Cause is why a SettleRetry was not recorded.
	Cause error
	// Copy is true when the inbox held the message already: a redelivery,
	// a re-publish, or a copy of a dead letter.
	Copy bool
}

// SourceStats counts what one source's Path did since it was created.
type SourceStats struct {
	// Delivered counts deliveries, redeliveries included.
	Delivered int64
	// Recorded counts messages that created their inbox row.
	Recorded int64
	// Duplicates counts copies recognised by the inbox (redeliveries and
	// re-publishes), and max_deliver quarantines that found their row.
	Duplicates int64
	// Invalid counts messages quarantined as store.ReasonInvalid or
	// store.ReasonTooLarge.
	Invalid int64
	// PayloadMismatches counts messages quarantined as
	// store.ReasonPayloadMismatch: a seen ID with a different payload.
	PayloadMismatches int64
	// MaxDelivered counts messages quarantined as store.ReasonMaxDeliver
	// that created their row.
	MaxDelivered int64
	// Retries counts deliveries that could not be recorded and were handed
	// back (SettleRetry).
	Retries int64
	// Started counts workflows started on the fast path, after the settle.
	Started int64
	// Waited counts deliveries that waited for room in their route's lane
	// before their insert (PathConfig.OneRoute).
	Waited int64
}
