// Package stripesim is an in-process simulator of the parts of the Stripe
// PaymentIntents API that effectively depends on, with Stripe's idempotency
// layer and a fault injector.
//
// A Server is an http.Handler. Serve it with httptest.NewServer in tests, or
// with an http.Server in a local stack, and point the official stripe-go
// client at it through stripe.BackendConfig.URL. Requests and responses are
// shaped the way stripe-go sends and expects them: form-encoded bodies in,
// Stripe-shaped JSON out.
//
// # Endpoints
//
//	POST /v1/payment_intents               create (confirm=true confirms at once)
//	POST /v1/payment_intents/{id}/confirm  confirm
//	GET  /v1/payment_intents/{id}          retrieve
//	GET  /v1/payment_intents               list, newest first: customer, created[gte|gt|lte|lt], limit, starting_after|ending_before
//	POST /v1/refunds                       refund a succeeded PaymentIntent: payment_intent, amount, reason, metadata
//	GET  /v1/refunds/{id}                  retrieve a refund
//	GET  /v1/refunds                       list refunds, newest first: payment_intent, created[gte|gt|lte|lt], limit, starting_after
//	GET  /v1/payment_intents/search        search, e.g. query=metadata['message_id']:'evt_1'
//
// Search is eventually consistent, as Stripe documents it: a new
// PaymentIntent is invisible to it for Options.SearchLag (a minute by
// default). Retrieve and list see it at once. A list cursor (starting_after,
// ending_before) that names no object is a 404 resource_missing on that
// parameter, as on Stripe, never the first page again.
//
// Requests must carry a test secret or restricted key (Authorization: Bearer
// sk_test_... or rk_test_...). The test payment methods pm_card_visa,
// pm_card_mastercard, pm_card_amex and pm_card_visa_debit succeed;
// pm_card_chargeDeclined and pm_card_chargeDeclinedInsufficientFunds are
// declined with a 402 card_error that embeds the PaymentIntent, as Stripe
// does. As on Stripe, the PaymentIntent shows a freshly minted pm_ ID, not
// the test payment method given in the request. Further test
// methods answer 200 with the other statuses a confirmation can end in
// (processing, requires_action, requires_payment_method, requires_capture,
// canceled), and pm_card_pendingRefund and pm_card_refundFail succeed but
// make their refunds pending, or failed after they succeeded, delivering
// charge.refund.updated; see statuses.go.
//
// # Idempotency
//
// POST requests that carry an Idempotency-Key header go through an
// idempotency layer that follows Stripe's documented rules:
//
//   - Requests that fail authentication or parameter validation, or that are
//     answered by an error_before or rate_limit fault, are not saved.
//   - Otherwise the first response for a key (status and body, declines and
//     500s included) is saved and replayed, byte for byte, to every later
//     request with the same key, with the headers Idempotent-Replayed: true
//     and Original-Request, for at least Options.KeyTTL.
//   - The same key with different parameters or another path is answered with
//     400 idempotency_error.
//   - The same key while the first request is still executing is answered
//     with 409 idempotency_error, code idempotency_key_in_use.
//
// POST requests without a key are executed every time. Every PaymentIntent
// that reaches status succeeded counts as one charge in Stats.
//
// # Bounds
//
// The simulator's memory is bounded. It keeps at most Options.MaxObjects
// PaymentIntents and as many Refunds (default DefaultMaxObjects, a million)
// and forgets the oldest past that: retrieve answers 404 resource_missing
// for a forgotten object, list and search no longer return it, and it can
// no longer be refunded. Idempotency keys expire after Options.KeyTTL (24
// hours, like Stripe's) and at most Options.MaxIdempotencyKeys are kept
// (default a million): past that the oldest settled key is forgotten and a
// request reusing it executes again, as after its expiry. A key whose first
// request is still executing is never forgotten. Stats are counters, not
// objects: they count everything since the last reset (ChargesByMessage
// and RefundsByMessage hold one entry per message ID).
//
// # Faults
//
// AddFault (or POST /_sim/faults) makes matching requests misbehave:
//
//	error_before  answer Status (default 500) as an api_error, perform nothing, save nothing
//	rate_limit    answer 429 rate_limit, perform nothing, save nothing
//	delay         sleep Delay once the key is reserved (so a concurrent request with
//	              the same key sees 409), or before a replay; a client that gives up
//	              meanwhile does not stop the request: it is performed at the end of
//	              the delay and its answer saved under the key, as Stripe goes on with
//	              a request it received (a replay's client that gives up gets nothing)
//	error_after   perform the request, then answer Status (default 500) as an
//	              api_error and save that answer under the key, as Stripe would
//	lost_after    perform the request, save the real answer under the key, then drop
//	              the connection without answering
//
// error_after and lost_after fire only on requests that are actually executed,
// never on replays. A fault with Times > 0 fires that many times and is then
// removed; Times 0 fires until the faults are cleared. When several faults
// match a request at one stage, the one added first fires.
//
// # Rate limits
//
// Options.RateLimits (or POST /_sim/rate_limits) limits each account (API
// key) as Stripe does: a global rate and one per endpoint (a create and a
// confirm are separate endpoints). Past either, a request is answered 429
// rate_limit right after authentication, so nothing is
// performed or saved under its key; the answer carries Retry-After (whole
// seconds until a token is back) and Stripe-Rate-Limited-Reason
// (global-rate or endpoint-rate). Stats.RateLimited counts them.
//
// # Control API
//
// The same handler serves a control API, without authentication:
//
//	GET    /_sim/stats    Stats as JSON
//	GET    /_sim/faults   the active faults and how many times each may still fire
//	POST   /_sim/faults   add a fault: {"match":{"message_id":"evt_1"},"kind":"lost_after","times":1}
//	DELETE /_sim/faults   remove all faults
//	POST   /_sim/reset    forget every PaymentIntent, key, statistic and fault
//	POST   /_sim/latency  set the latency added to every API request: {"latency_ms":5}
//	GET    /_sim/rate_limits  the rate limits: {"global":{"per_second":25,"burst":25},"endpoint":{…}}
//	POST   /_sim/rate_limits  set them (per_second 0: no limit)
//	POST   /_sim/payment_intents/settle  end a processing PaymentIntent: {"id":"pi_…","succeed":true}
//	POST   /_sim/refunds/settle  make a refund's status change now (SettleRefund): id=re_… or {"id":"re_…"}
//
// A fault's JSON form has the fields match (message_id, idempotency_key,
// path), kind, status, times and either delay_ms (milliseconds) or delay (a Go
// duration string such as "1.5s").
package stripesim
