// Package workflows holds effectively's deterministic orchestration, one
// workflow per route (internal/intake/route) and one for the schedule:
//
//   - OrderPlaced (order.placed, consumer order-placed) charges the order
//     once and, when paid, sends one receipt; a processing payment waits
//     for PaymentSettledSignal or its poll timer.
//   - OrderRefund (order.refund_requested, consumer order-refund) refunds
//     part of the order's payment once and, when refunded, sends one
//     refund receipt; it waits while the payment is still open.
//   - PruneRecords, run by the schedule PruneScheduleID, deletes processed,
//     dispatched inbox and published outbox rows older than the retention.
//
// Also here: their activity options and retry policies (options.go), the
// status query, the Stage and Outcome vocabulary (workflows.go) and the
// search attributes an operator finds a run by (search.go).
//
// Workflows here never touch Postgres or HTTP; they call activities by
// their registered names, whose results are recorded in the workflow's
// history and replayed, never re-run, when a worker rebuilds its state.
package workflows
