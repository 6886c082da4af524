// Package payment is effectively's thin wrapper around the official Stripe
// client (stripe-go v76): it charges a card once per message and refunds
// part of a payment once per message.
//
// # Create, confirm, retrieve
//
// ChargeOrder (activities) charges in two requests, each under its own
// caller-chosen idempotency key:
//
//   - Create makes the PaymentIntent unconfirmed (nothing can be charged
//     yet), tagged with the message and order IDs in its metadata, under
//     "paymentintent:<message id>": every attempt within Stripe's 24-hour
//     key window gets the same PaymentIntent back.
//   - Confirm charges it off-session under "payment:<message id>"; the
//     caller records the PaymentIntent's ID with the outcome.
//   - Get retrieves a PaymentIntent by its recorded ID, a strongly
//     consistent read: it settles an ambiguous confirmation and a
//     processing payment. A PaymentIntent succeeds at most once, so no
//     retry that reaches the same PaymentIntent can charge twice.
//   - FindInWindow serves a retry that has no ID recorded and whose create
//     key may have expired: it lists the PaymentIntents created over the
//     claim's recent window (strongly consistent) and searches only what is
//     older than Stripe's Search lag (SearchLag).
//
// Refund refunds under "refund:<message id>"; FindRefund lists a
// PaymentIntent's refunds (strongly consistent) for a retry past the key
// window. Keys are mandatory: without one stripe-go invents a random key
// per call, and a redelivered message would be charged twice. Parameters
// are a pure function of the request, never of the clock or the attempt,
// so a retry under the same key is the same request to Stripe.
//
// Only a succeeded PaymentIntent is a charge: Charge.Verdict maps a status
// to paid, processing, failed (requires_payment_method, canceled,
// requires_action off-session), unconfirmed or unexpected.
//
// Charge (create and confirm in one request) and FindByMessageID (Search
// alone) are not on the product's path: the first serves the lab's
// reference bench, the second FindInWindow's older part.
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
// Every failed request to Stripe, and every request refused before it is
// sent, wraps an *Error whose Class tells the caller what to do (see Class
// and Classify):
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
// # Search
//
// Stripe documents its search API as eventually consistent: normally a
// minute behind writes, up to an hour during incidents. ErrNotFound from
// Search shortly after a write proves nothing, so effectively never uses it
// for read-after-write. The simulator in sim/stripesim lags by
// Options.SearchLag (a minute by default).
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
