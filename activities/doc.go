// Package activities holds the code that touches the world: Postgres, Stripe
// and SendGrid. Each exported method of Activities is an activity type that
// running workflow histories refer to by name (names.go): rename them with
// care, and keep helpers unexported.
//
// Per route (internal/intake/route): order.placed runs ChargeOrder (or
// ChargeOrderLocally first), SettlePayment while a payment is processing,
// and SendReceipt (or SendReceiptLocally); order.refund_requested runs
// RefundOrder (or RefundOrderLocally first) and SendRefundReceipt (or
// SendRefundReceiptLocally). The PruneRecords schedule runs Prune.
//
// Every effect follows the effect protocol of internal/effect (claim with a
// fencing token, drain-safe call with heartbeats, replay inside the key
// window and a strongly consistent lookup past it, the find checked before
// it is adopted, one error classification in which a provider's 401/403 is
// retryable and alerting, ErrTypeProviderAuth). ChargeOrder, RefundOrder,
// SendReceipt and SendRefundReceipt are effect.Kind implementations run by
// effect.Run (charge.go, refund.go, receipt.go), each supplying its call,
// lookup, check and record.
//
// Every activity is safe to retry, and Temporal does retry them:
//
//   - ChargeOrder claims the order in Postgres before it calls Stripe (a
//     second message for the same order is a business duplicate and never
//     charges; a local attempt takes the claim the intake took in the
//     inbox transaction instead, inside the key window), then creates the PaymentIntent unconfirmed under the key
//     "paymentintent:<message id>" and confirms it under
//     "payment:<message id>", with parameters built from the message alone;
//     the record after the confirmation carries its ID. A retried call is
//     replayed by Stripe; an ambiguous answer is settled by retrieving the
//     PaymentIntent (or, when no ID is known, by listing the claim's time
//     window, with Search only for what is older than Stripe's documented
//     hour of Search lag), never by Search right after a write. Only a succeeded
//     PaymentIntent is recorded as paid, together with the message's
//     processed row in one transaction, which also claims the receipt: the
//     attempt that made that record, and no other, sends the receipt under
//     that claim and records it. Processing and unexpected statuses are
//     recorded as open cases.
//   - SettlePayment reads a processing payment back from Stripe by its
//     recorded ID and records the outcome; the workflow runs it when a
//     payment-settled signal or its poll timer wakes it.
//   - SendReceipt returns the receipt the charge sent, when it did;
//     otherwise it consults the effect ledger under "email:<message id>"
//     before it sends, and records SendGrid's X-Message-Id after. SendGrid
//     accepts no idempotency key, so a retry first waits ResendGrace for
//     SendGrid's event about the earlier send; without one, a crash between
//     the send and the record repeats the receipt under the default
//     at-least-once policy; the at-most-once policy refuses to resend
//     instead, and may lose it.
//   - RefundOrder decides the refund in Postgres, then refunds under
//     "refund:<message id>"; past Stripe's key window it lists the
//     PaymentIntent's refunds first and adopts the message's one.
//   - SendRefundReceipt is SendReceipt for a refund, under its own key
//     "refundemail:<message id>" (a row an earlier release left under
//     "email:<message id>" is claimed instead).
//
// Errors are classified here, at the boundary: permanent failures become
// temporal.NewNonRetryableApplicationError with one of the ErrType constants;
// everything else is a plain (retryable) error.
package activities
