package httpapi

// ForceReload makes the next lookup read the tokens file again, without the
// second's wait.
func ForceReload(t *Tokens) { t.forceReload() }
