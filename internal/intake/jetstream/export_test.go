package jetstream

// SetBeforeCreate sets what runs between NewConsumer's reading of the
// durable's start and its create, until the returned func restores it.
func SetBeforeCreate(f func()) (restore func()) {
	prev := beforeCreate
	beforeCreate = f
	return func() { beforeCreate = prev }
}
