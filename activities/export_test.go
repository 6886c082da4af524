package activities

// RequestHash exposes requestHash to tests.
func RequestHash(v any) string { return requestHash(v) }
