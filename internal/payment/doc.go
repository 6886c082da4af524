// Package payment is effectively's thin wrapper around the official Stripe
// client (stripe-go v76) for charging a card once per message.
//
// A Client charges with a PaymentIntent that is created and confirmed in one
// request (confirm=true, off_session=true), tagged with the message ID and
// order ID in its metadata, and sent under a caller-chosen idempotency key.
// The key is mandatory: without one stripe-go invents a random key per call,
// and a redelivered message would be charged twice. The parameters are a pure
// function of the ChargeRequest, never of the clock or the attempt, so a
// retry under the same key is always the same request to Stripe.
//
// # Retries
//
// stripe-go retries some failures itself, MaxNetworkRetries times, always
// with the same idempotency key: transport errors (including a connection
// lost after the request was sent), 409 conflicts, 503s, and any 5xx to a
// GET. It does not retry a 500 to a POST (Stripe saves that answer under the
// key, so a retry would only replay it) nor a 429 rate_limit. Its pause
// between attempts (0.5s to 5s) does not watch the context, so a cancelled
// call may return up to one pause late.
//
// Independently, Go's HTTP transport itself replays a request that carries
// an Idempotency-Key header when a reused keep-alive connection turns out to
// have been closed before any answer arrived. With the same key this is
// harmless, but it means a lost answer can be recovered even with
// MaxNetworkRetries set to NoNetworkRetries.
//
// # Errors
//
// Every failure of Charge, Get and FindByMessageID wraps an *Error whose
// Class tells the caller what to do (see Class and Classify):
//
//	declined              the card was declined: final
//	invalid_request       the request is wrong (400, 401, 403, 404): final
//	idempotency_mismatch  the key was used with other parameters: a bug, final
//	in_flight             the key is in use by a request still running: retry later
//	rate_limited          429: retry later
//	transient             transport error, timeout or 5xx: retry with the same key
//	ambiguous             Stripe replayed a saved 500 for the key: the charge may
//	                      or may not have happened, and retrying the key will only
//	                      replay the 500 again; reconcile with Get (by the recorded
//	                      ID) or FindInWindow
//
// A fresh 500 to the create request is classified transient: a retry with the
// same key either executes the request (Stripe saved nothing) or replays the
// saved 500, which is then classified ambiguous.
//
// # Create, then confirm
//
// Create makes the PaymentIntent unconfirmed (nothing can be charged yet)
// under its own key, which replays the same PaymentIntent for 24 hours;
// Confirm charges it under another key. A PaymentIntent succeeds at most
// once, so an ambiguous confirmation is settled by Get, a strongly
// consistent read. FindInWindow lists the PaymentIntents created over a
// time window (also strongly consistent) for a create whose key expired
// before its ID was recorded.
// Charge (create and confirm in one request) remains for callers that need
// a single request.
//
// Only a succeeded PaymentIntent is a charge: Charge.Verdict maps a status
// to paid, processing, failed (requires_payment_method, canceled,
// requires_action off-session), unconfirmed or unexpected.
//
// # Search
//
// FindByMessageID uses Stripe's search API, which Stripe documents as
// eventually consistent: normally a minute behind writes, up to an hour
// during incidents. ErrNotFound from it shortly after a write proves
// nothing, so effectively never uses it for read-after-write; it is kept
// for looking up data older than that lag. The simulator in
// sim/stripesim lags by Options.SearchLag (a minute by default).
//
// # Key namespace
//
// Stripe keeps idempotency keys per account. Deployments that share an
// account and a message-ID space set Config.Namespace
// (EFFECTIVELY_KEY_NAMESPACE), one per deployment: the Client then sends
// every key scoped (identity.Scope: "eu/payment:evt_1", hashed like
// identity.Key when too long, so within MaxIdempotencyKeyLen), tags what it
// creates with metadata[effectively_namespace], and its lookups skip
// objects of another namespace, so one deployment never replays or adopts
// another's PaymentIntent or Refund. Callers keep passing unscoped keys,
// which are also the Postgres ledger's. Without a namespace nothing
// changes: keys are sent as given and no metadata is added.
//
// # Configuration
//
// Config.APIKey is meant to come from the STRIPE_API_KEY environment variable
// and Config.BaseURL from STRIPE_BASE_URL (empty for real Stripe, or the
// simulator's address such as http://127.0.0.1:12111). The API key is never
// logged and never appears in an error: Config's String and LogValue methods
// redact it.
package payment
