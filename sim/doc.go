// Package sim holds effectively's provider simulators, public so that your
// own tests can use them: stripesim speaks the parts of Stripe's
// PaymentIntents API that a payments consumer needs, with Stripe's
// idempotency layer, sendgridsim speaks SendGrid's Mail Send API, and both
// inject faults through simfault (fail before or after performing, lose the
// response, rate limit, answer late). providersim runs both as one server.
//
// Point the official clients at them and assert on what the provider saw:
// stripesim's Stats count charges per message, sendgridsim's count
// deliveries per idempotency key, so a test can prove that a redelivered
// message charged once and mailed once. The Example shows a user's test
// doing that with stripe-go and sendgrid-go.
//
// Neither simulator is a faithful copy of its provider: each package's doc
// lists what it implements. They never reach the internet.
package sim
