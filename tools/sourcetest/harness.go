// Package sourcetest is the conformance suite every intake.Source runs:
// the same cases, written once, against each broker (the model is
// watermill's pubsub/tests). A broker implements Harness in its own test and
// calls Run:
//
//	func TestConformance(t *testing.T) { sourcetest.Run(t, harness{}) }
//
// The suite records into a fresh Postgres database per case with a fake
// Temporal client (the fast-path start is counted), and asserts what an
// operator would see: one inbox row per message, its copies counted, one
// workflow start per message, quarantine rows with their reasons, and
// nothing left unsettled at the broker. A case a broker cannot express is
// reported as n/a with the harness's reason (a skip whose message starts
// with "n/a:"), never silently left out.
//
// Crashes are made at the two points that matter, around the inbox
// statement, from the database side: the suite's pool breaks the
// statement's connection just before it runs (a crash before the commit:
// nothing recorded) or crashes the worker just after it committed (a crash
// before the settle). Worker.Crash is what the broker sees of a SIGKILL: the
// connection drops with the deliveries unsettled; the suite also fails every
// later statement of the crashed worker's pool.
package sourcetest

import (
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake"
)

// Case names a conformance case.
type Case string

// The cases, in the order Run runs them.
const (
	CaseCopies            Case = "copies"
	CaseLostAck           Case = "lost_ack"
	CaseCrashAfterCommit  Case = "crash_after_commit"
	CaseCrashBeforeCommit Case = "crash_before_commit"
	CasePostgresDown      Case = "postgres_down"
	CaseBrokerRestart     Case = "broker_restart"
	CaseMaxAttempts       Case = "max_attempts"
	CaseOutagePastLimit   Case = "outage_past_limit"
	CaseDeadLetter        Case = "dead_letter"
	CaseOversized         Case = "oversized"
	CaseTwoWorkers        Case = "two_workers"
	CaseHandover          Case = "handover"
	CaseOrdering          Case = "ordering"
)

// Cases lists every case.
var Cases = []Case{CaseCopies, CaseLostAck, CaseCrashAfterCommit, CaseCrashBeforeCommit, CasePostgresDown,
	CaseBrokerRestart, CaseMaxAttempts, CaseOutagePastLimit, CaseDeadLetter, CaseOversized, CaseTwoWorkers, CaseHandover, CaseOrdering}

// Harness is one broker's side of the suite.
type Harness interface {
	// Name names the broker in test names ("jetstream").
	Name() string
	// NA returns why the broker cannot express case c, or "" when it can.
	NA(c Case) string
	// NewSubscription creates a topic, queue or stream of the test's own and
	// the subscription the workers share, removed when t ends.
	NewSubscription(t testing.TB, o SubscriptionOptions) Subscription
}

// SubscriptionOptions shape a case's subscription.
type SubscriptionOptions struct {
	// MaxAttempts is the delivery limit where the broker has one (JetStream
	// MaxDeliver, RabbitMQ x-delivery-limit); the last delivery is
	// quarantined when it cannot be recorded. The suite sets it high except
	// in CaseMaxAttempts.
	MaxAttempts int
	// Redelivery is how soon a delivery left unsettled (a lost ack) should
	// come back where the broker redelivers on a timer (JetStream's ack
	// wait), and how long a source that holds a failed delivery before
	// handing it back (RabbitMQ) holds it after the first time; short, for
	// tests, yet long enough that an outage case does not use up
	// MaxAttempts.
	Redelivery time.Duration
	// LongPulls keeps a pulling source's requests open for seconds
	// (JetStream's expiry, and its heartbeats), not the quick ones the other
	// cases use: a missed heartbeat on a loaded machine drops the pull, and
	// a delivery the broker sent it is lost in transit, counted all the
	// same. Lost on the last delivery, it is never delivered again
	// (CaseOutagePastLimit must not depend on that).
	LongPulls bool
}

// Subscription is one case's subscription.
type Subscription interface {
	// Publish publishes raw once, as a producer would; the broker must not
	// drop a second Publish of the same bytes (no publish dedup), so that
	// copies reach the source. It returns the broker's refusal, if any.
	Publish(t testing.TB, raw []byte) error
	// NewWorker returns a worker consuming the subscription into in, as a
	// new worker process would: a connection of its own. Not yet running.
	// Two workers share the subscription.
	NewWorker(t testing.TB, in *intake.Intake, o WorkerOptions) Worker
	// RestartBroker stops and starts the broker (CaseBrokerRestart); the
	// running workers must reconnect by themselves.
	RestartBroker(t testing.TB)
	// Unsettled is how many messages the broker still holds for the
	// subscription undelivered or delivered and not settled (unacked,
	// uncommitted).
	Unsettled(t testing.TB) int
}

// WorkerOptions shape a worker.
type WorkerOptions struct {
	// LoseSettles makes the broker never receive this worker's settles
	// (acks, commits) while its connection stays up (CaseLostAck).
	LoseSettles bool
}

// Worker is a source as one worker process runs it.
type Worker interface {
	intake.Source
	// Crash drops the worker's broker connection at once, settling nothing
	// more, and ends its Run: what the broker sees of a SIGKILL.
	Crash()
}
