package intake

// Reject is reject, the one way a message that is not too_large by decode
// (max_deliver, payload_mismatch, an inbox row that no longer decodes)
// enters the quarantine.
var Reject = (*Intake).reject

// Refused is refused: whether a record's error is Postgres' own refusal.
var Refused = refused
