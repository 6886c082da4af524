package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The inbox statements, for tests that run them in a transaction of their
// own.
const (
	InboxGroupInsertSQL = inboxGroupInsert
	InboxGroupAsyncSQL  = inboxGroupAsync
	// ReserveSQL is ReserveRate's statement, which Warm prepares.
	ReserveSQL = reserveSQL
)

// InboxGroupSize is how many InsertInbox calls a statement of the inbox's
// group commit records (the length of its message-ID array), else 0.
func InboxGroupSize(sql string, args []any) int {
	if sql != inboxGroupInsert || len(args) < 2 {
		return 0
	}
	ids, _ := args[1].([]string)
	return len(ids)
}

// RecordRefundInTx runs RecordRefundClaimingReceipt's statement (no
// receipt) inside tx, so that a test can hold its commit.
func RecordRefundInTx(ctx context.Context, tx pgx.Tx, r RefundSuccess) (int, error) {
	res, err := encodeResult(r.Key, map[string]any{"refund_id": r.RefundID, "status": r.Status})
	if err != nil {
		return 0, err
	}
	var n int
	var receipt int32
	err = tx.QueryRow(ctx, recordRefundedClaimingReceiptSQL, r.Key, r.Claim, StateSucceeded, r.RefundID, res, "",
		r.Consumer, r.MessageID, r.OrderID, r.Status, "", KindEmail, "", StateClaimed).Scan(&n, &receipt)
	return n, err
}
