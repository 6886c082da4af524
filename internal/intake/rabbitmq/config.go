package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/intake/retention"
)

// Defaults of the RabbitMQ source. internal/config applies them.
const (
	// DefaultURL is the broker: the local server, guest/guest.
	DefaultURL = "amqp://guest:guest@127.0.0.1:5672/" //nolint:gosec // RabbitMQ's well-known local account, refused from beyond loopback
	// DefaultExchange is the topic exchange messages are published to,
	// with the message type as routing key.
	DefaultExchange = "effectively.messages"
	// DefaultQueue is the quorum queue every worker process consumes.
	DefaultQueue = "effectively.messages"
	// DefaultMessageTTL bounds a message's life in the queue: the source's
	// redelivery horizon. A message not acked by then is dead-lettered.
	DefaultMessageTTL = 7 * 24 * time.Hour
	// DefaultMaxDeliver is the delivery on which a message that still
	// cannot be recorded is quarantined as store.ReasonMaxDeliver.
	DefaultMaxDeliver = 5
	// DefaultPrefetch is the per-channel prefetch (basic.qos, global=false).
	DefaultPrefetch = 200
	// DefaultHandlers is how many deliveries are settled at once.
	DefaultHandlers = 64
	// DefaultStarters is how many workflow starts are in flight after acks.
	DefaultStarters = 32
	// SourceRabbitMQ is the source recorded for messages from the broker.
	SourceRabbitMQ = "rabbitmq"
	// MaxMessageTTL is the largest x-message-ttl RabbitMQ accepts (2^32-1 ms).
	MaxMessageTTL = time.Duration(math.MaxUint32) * time.Millisecond
)

// DefaultRetryDelays is how long a delivery that could not be recorded is
// held before it is rejected back to the queue, by delivery (the last
// repeats): RabbitMQ redelivers a rejected message at once, and the only
// reason a valid message is not recorded is an outage of Postgres.
var DefaultRetryDelays = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second}

// Config configures a Consumer and the topology it declares. Zero values
// take the defaults noted per field.
type Config struct {
	// Name is the source's name: metrics label, health check, the source
	// of its rows. Default SourceRabbitMQ.
	Name string
	// URL of the broker (amqp:// or amqps://). Default DefaultURL.
	URL string
	// Exchange is the topic exchange bound to Queue with "#". Default
	// DefaultExchange.
	Exchange string
	// Queue is the quorum queue consumed. Default DefaultQueue.
	Queue string
	// DeadLetterExchange receives what the broker dead-letters from Queue
	// (expired, past the delivery limit). Default Queue+".dlx".
	DeadLetterExchange string
	// DeadLetterQueue holds the dead letters until the worker quarantines
	// them. Default Queue+".dead".
	DeadLetterQueue string
	// MessageTTL is the queue's x-message-ttl: the redelivery horizon.
	// Default DefaultMessageTTL; negative means none, which is refused.
	MessageTTL time.Duration
	// MaxDeliver is the delivery on which an unrecorded message is
	// quarantined; the queue's x-delivery-limit. Default DefaultMaxDeliver.
	MaxDeliver int
	// RetryDelays is the hold before a failed delivery is rejected, by
	// delivery, the last repeating. Default DefaultRetryDelays.
	RetryDelays []time.Duration
	// Prefetch is the per-channel prefetch count. Default DefaultPrefetch.
	Prefetch int
	// Handlers settle deliveries concurrently. Default DefaultHandlers.
	Handlers int
	// Starters bound the workflow starts after acks. Default DefaultStarters.
	Starters int
	// SetupTimeout bounds each connection's setup (channel, declarations,
	// QoS, consume) and the horizon check's. Default SetupTimeout.
	SetupTimeout time.Duration
	// Logger receives a line per failure, reconnect and quarantine.
	// Default slog.Default().
	Logger *slog.Logger
	// Metrics counts the settlements by source. Nil counts nothing.
	Metrics *metrics.Metrics
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = SourceRabbitMQ
	}
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.DeadLetterExchange == "" {
		c.DeadLetterExchange = c.Queue + ".dlx"
	}
	if c.DeadLetterQueue == "" {
		c.DeadLetterQueue = c.Queue + ".dead"
	}
	if c.MessageTTL == 0 {
		c.MessageTTL = DefaultMessageTTL
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.RetryDelays == nil {
		c.RetryDelays = DefaultRetryDelays
	}
	if c.Prefetch == 0 {
		c.Prefetch = DefaultPrefetch
	}
	if c.Handlers <= 0 {
		c.Handlers = DefaultHandlers
	}
	if c.Starters <= 0 {
		c.Starters = DefaultStarters
	}
	if c.SetupTimeout <= 0 {
		c.SetupTimeout = SetupTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrNoHorizon reports a queue without a message TTL: an unacked message
// would wait in it forever, so no retention would be safe.
var ErrNoHorizon = fmt.Errorf("%w: the queue has no message TTL, so a message can be redelivered at any time and no retention is safe", retention.ErrNoHorizon)

// Validate reports a configuration the broker would refuse or that leaves
// the redelivery horizon unbounded.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	for _, n := range []struct{ field, name string }{
		{"Exchange", c.Exchange}, {"Queue", c.Queue}, {"DeadLetterExchange", c.DeadLetterExchange}, {"DeadLetterQueue", c.DeadLetterQueue},
	} {
		if err := validName(n.name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.field, err))
		}
	}
	if c.DeadLetterQueue == c.Queue || c.DeadLetterExchange == c.Exchange {
		errs = append(errs, errors.New("DeadLetterQueue and DeadLetterExchange must differ from Queue and Exchange"))
	}
	switch {
	case c.MessageTTL < 0:
		errs = append(errs, fmt.Errorf("MessageTTL: %w", ErrNoHorizon))
	case c.MessageTTL < time.Millisecond || c.MessageTTL > MaxMessageTTL:
		errs = append(errs, fmt.Errorf("MessageTTL %s: must be between 1ms and %s (RabbitMQ's x-message-ttl limit)", c.MessageTTL, MaxMessageTTL))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("MaxDeliver %d: must be at least 1", c.MaxDeliver))
	}
	for i, d := range c.RetryDelays {
		if d < 0 {
			errs = append(errs, fmt.Errorf("RetryDelays entry %d (%s) must not be negative", i+1, d))
		}
	}
	if c.Prefetch < 1 || c.Prefetch > math.MaxUint16 {
		errs = append(errs, fmt.Errorf("prefetch %d (Prefetch): must be between 1 and %d", c.Prefetch, math.MaxUint16))
	}
	return errors.Join(errs...)
}

// validName checks an exchange or queue name as RabbitMQ does (at most 255
// bytes, not amq.*), and that it is not empty.
func validName(s string) error {
	switch {
	case s == "":
		return errors.New("name is empty")
	case len(s) > 255:
		return fmt.Errorf("name %.20q… is longer than 255 bytes", s)
	case strings.HasPrefix(s, "amq."):
		return fmt.Errorf("name %q: the amq. prefix is reserved by RabbitMQ", s)
	case strings.ContainsAny(s, "\r\n\t"):
		return fmt.Errorf("name %q contains control characters", s)
	}
	return nil
}

// Horizon is how long after its publish a copy of a message can still
// reach the consumer: the queue's message TTL. Past it the broker
// dead-letters the message (the worker quarantines it) instead of
// delivering it. A publisher's re-publish is a new message with a TTL of its
// own: only the inbox recognises it, for as long as RETENTION keeps the row.
func (c Config) Horizon() (time.Duration, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	return c.withDefaults().MessageTTL, nil
}

// queueArgs are the arguments of the consumed quorum queue. Declaring an
// existing queue with other values fails (406 PRECONDITION_FAILED), so a
// queue the worker consumes always has them.
func (c Config) queueArgs() amqp.Table {
	return amqp.Table{
		"x-queue-type":              "quorum",
		"x-message-ttl":             c.MessageTTL.Milliseconds(),
		"x-delivery-limit":          int64(c.MaxDeliver),
		"x-dead-letter-exchange":    c.DeadLetterExchange,
		"x-dead-letter-strategy":    "at-least-once",
		"x-overflow":                "reject-publish",
		"x-dead-letter-routing-key": c.DeadLetterQueue,
	}
}
