// Package intake turns received messages into started workflows, exactly
// once per (consumer, message ID).
//
// A message travels: decode and validate → inbox INSERT … ON CONFLICT (a copy
// is recognised here, in one Postgres round trip, for as long as the inbox
// row is kept — long after Temporal has forgotten the workflow ID) → start
// the workflow with the derived ID and explicit reuse/conflict policies → mark
// the inbox row dispatched.
//
// A crash between the insert and the start leaves the row pending; the next
// attempt (a redelivered copy, or a dispatcher pass) starts it. A crash
// between the start and the mark finds the workflow already started and
// marks it then. A message that cannot be processed is quarantined with its
// reason, never dropped.
//
// Brokers plug in as a Source (source.go): a package under internal/intake
// (jetstream, …) turns each broker delivery into a Delivery and settles it as
// its Path decides (path.go): the decision, the inbox, the fast-path start
// and the counters are written once, here, for every broker.
package intake
