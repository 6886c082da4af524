// Package effect is the protocol every external effect of effectively
// follows: the charge, the refund, the order receipt and the refund receipt.
// What each of them must get right is written here once; an effect kind
// supplies only its request, its provider call, its lookup and its record
// (Kind).
//
// The protocol, for one attempt:
//
//  1. Begin: the attempt runs on a context that a worker's drain does not
//     cancel (its deadline still holds), and a regular activity heartbeats
//     until it ends. A draining worker refuses new attempts (ErrDraining)
//     before they claim anything.
//  2. The claim (the caller's, in Postgres) returns a fencing token and the
//     time of the first claim: an Attempt. Only the token's holder may
//     record, so a superseded attempt can never settle the row.
//  3. A lost answer: an attempt whose claim follows another (Claim > 1)
//     cannot know whether the earlier one reached the provider. Inside the
//     provider's key window it calls again under the same key, and the
//     provider replays the first answer. Past the window, or when the
//     provider keeps no key at all (SendGrid), it looks the effect up first,
//     strongly consistently (a retrieve by recorded ID, a list scoped to the
//     object such as the refunds of one PaymentIntent, the event table plus
//     the resend grace for mail), and calls only when nothing is found. A
//     claim after claims that all gave their request back unsent
//     (Releaser, Attempt.Unsent) is as good as the first.
//  4. What a lookup finds is checked against the request (amount, currency,
//     method, namespace: Kind.Differs) before it is adopted. One that
//     differs is never recorded as this effect's outcome (Kind.Foreign).
//  5. A failed call is classified (Class): retry under the same key; alert
//     (authentication or configuration: retried, never recorded as the
//     effect's outcome, and counted for an operator); refused for good
//     (recorded); ambiguous (look it up); key reused with another request (a
//     bug). A request never sent (NotSent: no rate-limit slot in time, or
//     too near its attempt's deadline) is deferred, not a failure.
//  6. The record, in one transaction with the message's processed row
//     (Kind.Record).
//
// Keys: an effect's key is "<effect name>:<message id>" (internal/leaf/identity),
// and every effect kind has its own name (Names), so no two effects, and no
// two messages, share a key. A message ID is unique per consumer; each
// effect name is used by the effects of one consumer only, so two consumers
// cannot share a key either.
//
// The protocol adds no Postgres transaction: Run makes none of its own, but
// for a Releaser's give-back of a request never sent.
package effect
