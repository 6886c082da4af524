package store

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
