// Package store is effectively's Postgres layer: the pgx pool, one
// transaction helper, the embedded schema migrations, the queries of each
// table, and the translation of driver errors into this package's errors.
//
// Postgres is the lasting record of what happened to a message. Temporal
// forgets a workflow ID when the namespace's retention deletes the closed
// run; the rows written here do not expire with it.
//
// Every deduplication here is a constraint, never a SELECT followed by an
// INSERT: the inbox rejects a copy at the insert, payments.order_id is unique
// (the business key), processed_messages has (consumer, message_id) as its
// primary key, and the effect ledger is keyed by idempotency key. Each state
// change commits in one transaction with the processed-message row that
// records it, so there is no moment when one exists without the other.
//
// The effect ledger's transitions are compare-and-set on (state, claim),
// where claim is a fencing token the database counts up at every claim of a
// row (not Temporal's attempt number, which starts again at 1 for a local
// activity after a worker crash). A caller whose claim was superseded (it
// timed out, and the retry or the regular-activity fallback claimed the row
// since) finds its update matching no row and gets ErrFenced instead of
// overwriting the newer state.
//
// # Lock order
//
// Every transaction that changes one message's effect takes its rows in one
// order: the message's ledger row (effects), then the order's payment row,
// then the refund and order rows. A single statement of CTEs (the records)
// takes them in that order because each later CTE waits for the ledger's;
// a transaction of several statements (a claim's slow path, a refund's
// claim, a webhook's settlement) locks the ledger row first with
// lockEffect. Two paths that took them the other way round deadlocked
// (SQLSTATE 40P01, TestClaimRecordAndWebhookShareOneLockOrder).
//
// The inbox insert's claims are the exception: they lock no existing
// ledger row, because the rows they claim are new. A refund claimed there
// locks its group's payments in order ID order and then inserts its refunds
// and ledger rows; an insert of the same key by another transaction fails
// the statement instead of waiting in a cycle, and the group is recorded
// again call by call, claiming nothing (inboxGroupRefunds).
package store
