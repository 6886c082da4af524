package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SetupTimeout is the default bound on a connection's setup: its channel,
// declarations, QoS and consume, or a publisher's channel, declarations
// and confirm mode. amqp091 waits for each answer with no deadline, and a
// broker may never send one: RabbitMQ 3.10.8 left a basic.consume on a
// quorum queue unanswered after its node was killed and started again,
// heartbeats still flowing, so the worker neither consumed nor could stop.
const SetupTimeout = 15 * time.Second

// CloseTimeout bounds a connection's close: connection.close waits for the
// broker's close-ok, which a broker that stopped answering never sends.
const CloseTimeout = 5 * time.Second

// CloseConn closes conn, giving the broker CloseTimeout to answer; past it
// the socket is closed. Close alone waits for the answer with no deadline.
func CloseConn(conn *amqp.Connection) error {
	return conn.CloseDeadline(time.Now().Add(CloseTimeout))
}

// abort closes conn under a call still waiting for the broker, which then
// ends with an error. Close's own connection.close would wait for an
// answer too: a second's deadline ends it, and the socket with it.
func abort(conn *amqp.Connection) { _ = conn.CloseDeadline(time.Now().Add(time.Second)) }

// closeUnanswered aborts conn unless the call it guards returns (and the
// timer is stopped) within CloseTimeout.
func closeUnanswered(conn *amqp.Connection) *time.Timer {
	return time.AfterFunc(CloseTimeout, func() { abort(conn) })
}

// watchSetup closes conn when ctx ends or limit passes before the setup is
// over, which ends the pending call with an error; timedOut (if not nil)
// runs when it was the limit. It returns the setup's end: called with the
// setup's last error (nil when it succeeded), it stops the watch and
// returns that error, saying so when the watch had closed the connection
// (then an error even when the call succeeded). Calls after the first
// only pass err through.
func watchSetup(ctx context.Context, conn *amqp.Connection, limit time.Duration, timedOut func()) (end func(err error) error) {
	sctx, cancel := context.WithTimeout(ctx, limit)
	stop := context.AfterFunc(sctx, func() { abort(conn) })
	var once sync.Once
	return func(err error) error {
		once.Do(func() {
			defer cancel()
			if stop() {
				return
			}
			what := fmt.Sprintf("no answer from the broker within %s; connection closed", limit)
			if ctx.Err() != nil {
				what = "stopping; connection closed"
			} else if timedOut != nil {
				timedOut()
			}
			if err == nil {
				err = errors.New(what)
			} else {
				err = fmt.Errorf("%w (%s)", err, what)
			}
		})
		return err
	}
}

// Bounded runs fn, calls on conn that wait for the broker (a channel, the
// declarations), and closes conn when fn has not returned within
// SetupTimeout or ctx ends first: the pending call then ends with an error
// saying so. conn is of no further use after that.
func Bounded(ctx context.Context, conn *amqp.Connection, fn func() error) error {
	return watchSetup(ctx, conn, SetupTimeout, nil)(fn())
}
