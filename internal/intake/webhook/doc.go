// Package webhook serves the providers' event webhooks on the worker:
// POST /webhooks/stripe (Stripe's signed events) and POST /webhooks/sendgrid
// (SendGrid's signed Event Webhook batches).
//
// Every request is verified before anything is read from it: Stripe's
// Stripe-Signature with stripe-go's webhook package (HMAC, timestamp
// tolerance, several secrets accepted during a rotation), SendGrid's ECDSA
// signature with sendgrid-go's helpers/eventwebhook and a timestamp age
// checked here (the helper does not). A request that fails verification, or
// whose body exceeds the cap, is answered 4xx, counted in
// effectively_webhook_requests_total{provider,result} and logged without
// its body; nothing is recorded.
//
// A verified event enters the same inbox as broker messages, under its own
// consumer (stripe-events, message ID evt_…; sendgrid-events, message ID
// sg_event_id), in one transaction with what it settles. A copy is a
// duplicate of the inbox row and changes nothing, so providers' at-least-once
// delivery is harmless; every settlement is a compare-and-set that never
// moves a row backwards, so the order of delivery does not matter either.
// The handler answers 2xx only after that transaction committed: a crash
// before the commit makes the provider deliver the event again.
//
// After the commit, a payment_intent event that settled (or, for a copy,
// agrees with) a final payment state signals the message's OrderPlaced
// workflow with workflows.PaymentSettled. A workflow that is closed or
// missing is not an error; any other signalling failure answers 5xx, so the
// provider retries and the copy signals again.
package webhook
