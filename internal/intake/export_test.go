package intake

// Reject is reject, the one way a message that is not too_large by decode
// (max_deliver, payload_mismatch, an inbox row that no longer decodes)
// enters the quarantine.
var Reject = (*Intake).reject

// Refused is refused: whether a record's error is Postgres' own refusal.
var Refused = refused

// Holds reports whether this process holds a last delivery of raw.
func (in *Intake) Holds(raw []byte) bool { return in.holds.find(raw) != nil }
