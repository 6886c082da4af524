package jetstream

import "time"

// SetBeforeCreate sets what runs between NewConsumer's reading of the
// durable's start and its create, until the returned func restores it.
func SetBeforeCreate(f func()) (restore func()) {
	prev := beforeCreate
	beforeCreate = f
	return func() { beforeCreate = prev }
}

// SetRetire sets how often a Retiring checks its durable and how many
// quiet checks in a row it needs, until the returned func restores them.
func SetRetire(every time.Duration, quiet int) (restore func()) {
	prevEvery, prevQuiet := retireEvery, retireQuiet
	retireEvery, retireQuiet = every, quiet
	return func() { retireEvery, retireQuiet = prevEvery, prevQuiet }
}

// SetDeadLetterRecordAge sets the age past which a dead letter is only
// quarantined, until the returned func restores it.
func SetDeadLetterRecordAge(d time.Duration) (restore func()) {
	prev := deadLetterRecordAge
	deadLetterRecordAge = d
	return func() { deadLetterRecordAge = prev }
}

// SetSkipFresh sets how old the shared consumer's view of its route
// durables may be, until the returned func restores it.
func SetSkipFresh(d time.Duration) (restore func()) {
	prev := skipFresh
	skipFresh = d
	return func() { skipFresh = prev }
}
