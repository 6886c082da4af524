package activities_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/sim/simfault"
)

// The effect conformance suite: one table of cases that every effect kind
// runs (charge, refund, order receipt, refund receipt, and the two receipts
// as the charge's and the refund's local attempts hold them; their adapters
// are in conformance_kinds_test.go), the way watermill's pubsub/tests runs one
// table against every Pub/Sub. Each case asserts what the user would see:
// how many times the provider performed the effect (the simulators'
// counters and recorded mails) and the effect's record in Postgres.
//
// A case that does not apply to a kind is named in the kind's
// notApplicable with the reason, which the suite prints; nothing is skipped
// silently.
//
// How the process-level faults are modelled in process:
//   - SIGKILL after the call: the attempt whose call the provider accepted
//     never hears the answer and never runs again until its retry has
//     recorded the effect (the proxy holds its answer); then it is let go
//     with a dropped connection, as a zombie whose late steps must change
//     nothing. The failpoints build tag (TestCrashWindows) kills the real
//     binary; this form runs every kind without a dev server.
//   - SIGTERM during the call: the worker's background context (the SDK's
//     "worker stopping") is cancelled while the provider call is held in the
//     proxy, and the activities' Drainer is waited on, as the worker does.

const (
	caseLost         = "LostAnswer"
	case503          = "Unavailable503"
	case401          = "Unauthorized401ThenFixed"
	caseExpired      = "KeyExpiredThenRetry"
	caseKilled       = "SIGKILLAfterTheCall"
	caseTerm         = "SIGTERMDuringTheCall"
	caseCopy         = "ExactCopy"
	caseSecond       = "SecondMessageSameBusinessKey"
	caseHookFirst    = "WebhookBeforeTheRecord"
	caseHookContra   = "WebhookContradictsTheRecord"
	caseLookupAmount = "LookupFindsAnotherAmount"
	caseTwoConsumers = "SameMessageIDTwoConsumers"
	casePostgresDown = "PostgresRestartAfterTheCall"
)

type confCase struct {
	name string
	run  func(t *testing.T, e *confEnv, k *confEffect, m confMsg)
}

var confCases = []confCase{
	{caseLost, confLostAnswer},
	{case503, confUnavailable},
	{case401, confUnauthorizedThenFixed},
	{caseExpired, confKeyExpired},
	{caseKilled, confKilledAfterTheCall},
	{caseTerm, confTerminatedDuringTheCall},
	{caseCopy, confExactCopy},
	{caseSecond, confSecondMessage},
	{caseHookFirst, confWebhookBeforeTheRecord},
	{caseHookContra, confWebhookContradicts},
	{caseLookupAmount, confLookupFindsAnotherAmount},
	{caseTwoConsumers, confTwoConsumers},
	{casePostgresDown, confPostgresRestart},
}

func TestEffectConformance(t *testing.T) {
	kinds := confKinds()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			// The kinds run side by side (each case has its own database and
			// simulators); the cases of one kind run in order.
			t.Parallel()
			for _, c := range confCases {
				t.Run(c.name, func(t *testing.T) {
					if reason, ok := k.notApplicable[c.name]; ok {
						t.Logf("%s: %s does not apply: %s", k.name, c.name, reason)
						return
					}
					e := newConfEnv(t)
					m := k.message("evt_" + confSlug(k.name) + "_" + c.name)
					if c.name == caseTwoConsumers {
						m.PaymentID = m.ID // the order.placed message is the one sharing the ID
					}
					k.prepare(e, m)
					c.run(t, e, k, m)
				})
			}
		})
	}
}

// confKindNamed is the adapter of name.
func confKindNamed(t *testing.T, name string) *confEffect {
	for _, k := range confKinds() {
		if k.name == name {
			return k
		}
	}
	t.Fatalf("no effect kind %q", name)
	return nil
}

func confSlug(s string) string { return strings.ReplaceAll(s, " ", "_") }

// confSettle runs attempts of k for m, as Temporal's retries would, until one
// returns or fails for good (at most n).
func confSettle(e *confEnv, k *confEffect, m confMsg, n int) (string, error) {
	var (
		out string
		err error
	)
	for range n {
		if out, err = k.call(context.Background(), e, m); !confRetryable(err) {
			break
		}
	}
	return out, err
}

// confWantDoneOnce asserts the effect's outcome, that the provider performed it
// exactly once, and that Postgres records it succeeded.
func confWantDoneOnce(t *testing.T, e *confEnv, k *confEffect, m confMsg, when, out string, err error) {
	t.Helper()
	if err != nil || out != k.success {
		t.Errorf("%s: %s %s: outcome %q, error %v; want %q", k.name, m.ID, when, out, err, k.success)
	}
	if n := k.performed(e, m); n != 1 {
		t.Errorf("%s: %s %s: the provider performed it %d times, want exactly 1", k.name, m.ID, when, n)
	}
	if row := k.ledger(e, m); row.State != k.doneState() {
		t.Errorf("%s: %s %s: ledger %q, want %s", k.name, m.ID, when, row, k.doneState())
	}
}

// confWantOpen asserts that a failed attempt left the effect unperformed and
// not finally recorded, and that its error is one Temporal retries.
func confWantOpen(t *testing.T, e *confEnv, k *confEffect, m confMsg, when, out string, err error) {
	t.Helper()
	if !confRetryable(err) {
		t.Errorf("%s: %s %s: outcome %q, error %v; want a retryable error", k.name, m.ID, when, out, err)
	}
	if n := k.performed(e, m); n != 0 {
		t.Errorf("%s: %s %s: the provider performed it %d times, want 0", k.name, m.ID, when, n)
	}
	if row := k.ledger(e, m); row.State == k.doneState() || row.State == "failed" {
		t.Errorf("%s: %s %s: ledger %q, want no final state", k.name, m.ID, when, row)
	}
}

// Lost answer: the provider performed the call and its answer was lost.
// The retry must not perform it again.
func confLostAnswer(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.proxy(e).onPerformed(func() int { return k.performed(e, m) }, confLoseAnswer)
	out, err := k.call(context.Background(), e, m)
	if err == nil {
		t.Errorf("%s: the attempt whose answer was lost returned %q without an error", k.name, out)
	}
	out, err = confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried after a lost answer", out, err)
}

// 503: the provider is unavailable; nothing is performed. The attempt fails
// retryably, and the retry once it is back performs the effect once.
func confUnavailable(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.fault(e, m, simfault.ErrorBefore, http.StatusServiceUnavailable)
	out, err := k.call(context.Background(), e, m)
	confWantOpen(t, e, k, m, "answered 503", out, err)
	k.clearFaults(e)
	out, err = confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried after the 503", out, err)
}

// 401 then fixed: the provider refuses our API key (a rotation gone wrong,
// a typo). That is our configuration, not the effect's outcome: attempts
// fail retryably, nothing is recorded final, and once the key is fixed the
// retry performs the effect once.
func confUnauthorizedThenFixed(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.revokeKey(e)
	for i := range 2 {
		out, err := k.call(context.Background(), e, m)
		confWantOpen(t, e, k, m, fmt.Sprintf("refused with 401 (attempt %d)", i+1), out, err)
	}
	k.restoreKey(e)
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried after the key was fixed", out, err)
}

// Key expired: the provider performed the call, the answer was lost, and
// the retry (or an operator's redrive) comes after the provider's key
// window (Stripe: 24 h) or the receipt's grace. It must find the effect,
// not perform it again.
func confKeyExpired(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.proxy(e).onPerformed(func() int { return k.performed(e, m) }, confLoseAnswer)
	if out, err := k.call(context.Background(), e, m); err == nil {
		t.Errorf("%s: the attempt whose answer was lost returned %q without an error", k.name, out)
	}
	k.expireKey(e, m)
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried past the key window", out, err)
}

// SIGKILL after the call: the attempt dies after the provider accepted and
// before the record; its retry takes over, and the dead attempt's late
// wake-up (a zombie) changes nothing.
func confKilledAfterTheCall(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	accepted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	k.proxy(e).onPerformed(func() int { return k.performed(e, m) }, func(w http.ResponseWriter, r *http.Request, answer *httptest.ResponseRecorder) {
		close(accepted)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		confLoseAnswer(w, r, answer) // the dead process never reads its answer
	})
	dead := make(chan error, 1)
	go func() {
		_, err := k.call(context.Background(), e, m)
		dead <- err
	}()
	select {
	case <-accepted:
	case err := <-dead:
		t.Fatalf("%s: the first attempt ended before the provider accepted the call: %v", k.name, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the provider never accepted the first attempt's call", k.name)
	}
	out, err := confSettle(e, k, m, 3)
	let()
	select {
	case zerr := <-dead:
		t.Logf("%s: the killed attempt, let go after its retry, returned %v", k.name, zerr)
	case <-time.After(20 * time.Second):
		t.Errorf("%s: the killed attempt did not return", k.name)
	}
	confWantDoneOnce(t, e, k, m, "retried after the attempt was killed after the call", out, err)
}

// SIGTERM during the call: the worker stops while the provider call is in
// flight. The drain lets the call finish and be recorded; nothing is left
// for a retry to repeat.
func confTerminatedDuringTheCall(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	e.acts.Drain = &activities.Drainer{}
	inFlight, resume := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	k.proxy(e).answerBefore(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || !held.CompareAndSwap(false, true) {
			return false
		}
		close(inFlight)
		<-resume
		if r.Context().Err() != nil {
			// The client gave up: the stop cut the call. Nothing performed.
			panic(http.ErrAbortHandler)
		}
		return false
	})
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := k.call(bg, e, m)
		done <- result{out, err}
	}()
	select {
	case <-inFlight:
	case r := <-done:
		t.Fatalf("%s: the attempt ended before its provider call: %q, %v", k.name, r.out, r.err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no provider call", k.name)
	}
	stop() // SIGTERM: the SDK cancels the activity's context
	type drainResult struct {
		left int
		err  error
	}
	drained := make(chan drainResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		left, err := e.acts.Drain.Wait(ctx)
		drained <- drainResult{left, err}
	}()
	time.Sleep(200 * time.Millisecond) // the cancellation reaches the client before the call goes on
	close(resume)
	r := <-done
	if d := <-drained; d.err != nil {
		t.Errorf("%s: the drain gave up with %d effects in flight: %v", k.name, d.left, d.err)
	}
	if r.err != nil || r.out != k.success {
		t.Errorf("%s: the attempt stopped during its call returned %q, %v; want %q: the stop cut the call from its record", k.name, r.out, r.err, k.success)
	}
	// The next worker's retry (no drain there) finds it recorded.
	e.acts.Drain = nil
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried after a SIGTERM during the call", out, err)
}

// An exact copy of the message, after its effect was recorded: the record
// answers, and the provider is not called at all.
func confExactCopy(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "first delivery", out, err)
	before, requests := k.ledger(e, m), k.requests(e)
	out, err = k.call(context.Background(), e, m)
	confWantDoneOnce(t, e, k, m, "copy", out, err)
	if n := k.requests(e); n != requests {
		t.Errorf("%s: the copy made %d provider requests, want none", k.name, n-requests)
	}
	if after := k.ledger(e, m); !after.same(before) {
		t.Errorf("%s: the copy changed the ledger: %q → %q", k.name, before, after)
	}
}

// A second message for the same business key (the same order): it causes
// what the kind allows (no second charge, no refund beyond the payment; a
// refund receipt of its own), and the first message's effect stands.
func confSecondMessage(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	m2, effects, outcome := k.second(m)
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "first message", out, err)
	for i := range 2 { // the second message, then its retry
		out, err = confSettle(e, k, m2, 3)
		switch {
		case effects == 0 && (err != nil || out != outcome):
			t.Errorf("%s: second message %s (try %d) = %q, %v; want %q", k.name, m2.ID, i+1, out, err, outcome)
		case effects == 1:
			confWantDoneOnce(t, e, k, m2, "second message", out, err)
		}
	}
	if n := k.performed(e, m2); n != effects {
		t.Errorf("%s: the provider performed the second message %d times, want %d", k.name, n, effects)
	}
	if effects == 0 {
		if row := k.ledger(e, m2); row.State == k.doneState() {
			t.Errorf("%s: the second message's ledger is %q, want no effect", k.name, row)
		}
	}
	confWantDoneOnce(t, e, k, m, "after the second message", k.success, nil)
}

// Postgres restarts after the call: the provider performed the effect and
// Postgres goes away before the record. The case takes the database away
// as a client sees a restart: every connection to it is cut and new ones
// are refused (restartable per database, beside the other cases). The
// attempt fails retryably, an attempt while Postgres is down makes no
// provider request (no claim, no call), and once Postgres is back the
// retry finds the effect and records it: performed once. The providers'
// webhooks that came meanwhile were refused with a 503 and are retried by
// the provider.
func confPostgresRestart(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.proxy(e).onPerformed(func() int { return k.performed(e, m) }, func(w http.ResponseWriter, _ *http.Request, answer *httptest.ResponseRecorder) {
		e.databaseDown()
		confDeliver(w, answer)
	})
	out, err := k.call(context.Background(), e, m)
	if !e.isDown() {
		t.Fatalf("%s: the provider never performed the first attempt's call (%q, %v)", k.name, out, err)
	}
	if !confRetryable(err) {
		t.Errorf("%s: the attempt whose record met Postgres down returned %q, %v; want a retryable error", k.name, out, err)
	}
	requests := k.requests(e)
	out, err = k.call(context.Background(), e, m)
	if !confRetryable(err) {
		t.Errorf("%s: an attempt while Postgres is down returned %q, %v; want a retryable error", k.name, out, err)
	}
	if n := k.requests(e) - requests; n != 0 {
		t.Errorf("%s: an attempt while Postgres was down made %d provider requests, want none", k.name, n)
	}
	e.databaseUp()
	if row := k.ledger(e, m); row.State == k.doneState() || row.State == "failed" {
		t.Errorf("%s: the record cut by the restart is %q, want no final state", k.name, row)
	}
	out, err = confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "retried after Postgres came back", out, err)
}

// A webhook before the record: the provider's event about the effect
// reaches the worker after the provider performed it and before the
// activity recorded it. One effect, recorded succeeded, whichever wins.
func confWebhookBeforeTheRecord(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	k.proxy(e).onPerformed(func() int { return k.performed(e, m) }, func(w http.ResponseWriter, _ *http.Request, answer *httptest.ResponseRecorder) {
		k.webhookBeforeRecord(e, m, answer)
		confDeliver(w, answer)
	})
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "with the webhook before the record", out, err)
}

// A webhook contradicting the record: after the effect was recorded, the
// provider reports something else. The record is not moved, and the event
// is kept (for charges, as an anomaly for an operator).
func confWebhookContradicts(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	out, err := confSettle(e, k, m, 3)
	confWantDoneOnce(t, e, k, m, "before the contradiction", out, err)
	e.quiesceSendGrid() // the send's own events are in
	before := k.ledger(e, m)
	k.contradict(e, m)
	if after := k.ledger(e, m); !after.same(before) {
		t.Errorf("%s: the contradicting webhook moved the record: %q → %q", k.name, before, after)
	}
	k.contradictionKept(e, m)
	confWantDoneOnce(t, e, k, m, "after the contradiction", k.success, nil)
}

// A lookup that finds another amount: the provider holds an object naming
// the message with another amount, and the activity must look the effect
// up (its answer was an ambiguous replayed 500). What it finds is not this
// effect: it is neither adopted nor settled, later (by its webhook) or now,
// and no new effect is made on a guess.
func confLookupFindsAnotherAmount(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	path := k.decoy(e, m)
	performed := k.performed(e, m) // the decoy
	var answered atomic.Bool
	k.proxy(e).answerBefore(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && r.URL.Path == path && answered.CompareAndSwap(false, true) {
			confReplayed500(w)
			return true
		}
		return false
	})
	out, err := confSettle(e, k, m, 3)
	row := k.ledger(e, m)
	t.Logf("%s: after the lookup: outcome %q, error %v, ledger %q", k.name, out, err, row)
	if row.State == k.doneState() || out == k.success {
		t.Errorf("%s: the lookup adopted an object of another amount: outcome %q, ledger %q", k.name, out, row)
	}
	if n := k.performed(e, m); n != performed {
		t.Errorf("%s: the provider performed %d effects for the message after the lookup, want %d (the other amount's only)", k.name, n, performed)
	}
	if k.afterDecoy != nil {
		k.afterDecoy(e, m)
		if after := k.ledger(e, m); after.State == k.doneState() {
			t.Errorf("%s: the webhook of the object of another amount settled the record: %q → %q", k.name, row, after)
		}
	}
}

// The same message ID under two consumers: an order.placed and an
// order.refund_requested may share an ID (the inbox keys by consumer and
// message ID). Each consumer's effect happens once and is recorded on its
// own; neither blocks nor answers for the other.
func confTwoConsumers(t *testing.T, e *confEnv, k *confEffect, m confMsg) {
	twin := confKindNamed(t, k.twin)
	tm := twin.message(m.ID)
	tm.PaymentID = m.ID
	order := []struct {
		k *confEffect
		m confMsg
	}{{k, m}, {twin, tm}}
	if k.twinFirst {
		order[0], order[1] = order[1], order[0]
	}
	for _, s := range order {
		s.k.prepare(e, s.m) // done already for k; the twin's (a paid order) is a copy then
		out, err := confSettle(e, s.k, s.m, 3)
		confWantDoneOnce(t, e, s.k, s.m, "under "+s.k.consumer+" with the ID "+m.ID+" shared with the other consumer", out, err)
	}
}
