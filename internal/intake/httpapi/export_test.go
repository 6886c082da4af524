package httpapi

import "time"

// ForceReload makes the next lookup read the tokens file again, without the
// second's wait.
func ForceReload(t *Tokens) { t.forceReload() }

// SetRecordTimeout sets the bound of one request's commit and start, until
// the returned func restores it.
func SetRecordTimeout(d time.Duration) (restore func()) {
	prev := recordTimeout
	recordTimeout = d
	return func() { recordTimeout = prev }
}
