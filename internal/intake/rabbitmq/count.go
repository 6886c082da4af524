package rabbitmq

import (
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Version is a RabbitMQ server version, read from the connection's server
// properties.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// atLeast reports whether v is major.minor or later.
func (v Version) atLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// ParseVersion reads "3.10.8" (a suffix such as "-rc.1" or "+build" is
// ignored).
func ParseVersion(s string) (Version, error) {
	core, _, _ := strings.Cut(s, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("rabbitmq version %q: want major.minor[.patch]", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("rabbitmq version %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// ServerVersion is the version the server announced in its connection
// properties.
func ServerVersion(props amqp.Table) (Version, error) {
	s, ok := props["version"].(string)
	if !ok {
		return Version{}, fmt.Errorf("rabbitmq server properties carry no version (got %T)", props["version"])
	}
	return ParseVersion(s)
}

// Attempts is what a delivery says about its earlier deliveries.
type Attempts struct {
	// Delivery is this delivery's number, 1 for the first, counting every
	// earlier delivery however it ended (reject, nack, a closed channel, a
	// crash): the number the consumer's own limit (MaxDeliver) applies to.
	Delivery int
	// Failures is the count the broker holds against the queue's
	// x-delivery-limit; past it the broker dead-letters the message.
	Failures int
}

// AttemptsOf is the one place that knows how each server version counts
// deliveries of a quorum queue message:
//
//   - before 4.3 (3.x, 4.0–4.2): every return (nack, reject, channel or
//     connection closed with the message unacked, consumer timeout) adds one
//     to x-delivery-count; the first delivery has no header. Since 4.0 a
//     queue without x-delivery-limit gets 20 and, without a dead-letter
//     exchange, drops the message there: Declare always sets both.
//   - from 4.3: only basic.reject counts toward x-delivery-count (and the
//     delivery limit); nack and a closed channel do not. x-acquired-count
//     counts every earlier delivery.
//
// Failed deliveries are handed back with Reject(requeue=true), which both
// count. Tests on 3.10.8 cannot show 4.3's behaviour: count_test.go covers
// each version's headers.
func AttemptsOf(v Version, headers amqp.Table) Attempts {
	delivered := headerCount(headers, "x-delivery-count")
	if v.atLeast(4, 3) {
		acquired, ok := headers["x-acquired-count"]
		if !ok {
			// A 4.3 server always sets it on a redelivery; without it the
			// reject count is the best lower bound there is.
			return Attempts{Delivery: delivered + 1, Failures: delivered}
		}
		return Attempts{Delivery: headerCount(amqp.Table{"n": acquired}, "n") + 1, Failures: delivered}
	}
	return Attempts{Delivery: delivered + 1, Failures: delivered}
}

// headerCount reads a non-negative count header of any integer type; a
// missing or malformed one reads 0.
func headerCount(h amqp.Table, key string) int {
	var n int64
	switch v := h[key].(type) {
	case int64:
		n = v
	case int32:
		n = int64(v)
	case int16:
		n = int64(v)
	case int8:
		n = int64(v)
	case int:
		n = int64(v)
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	default:
		return 0
	}
	if n < 0 || n > 1<<30 {
		return 0
	}
	return int(n)
}
