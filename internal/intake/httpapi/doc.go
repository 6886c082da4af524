// Package httpapi is the HTTP intake: POST /v1/messages takes a message
// under the Idempotency-Key contract (draft-ietf-httpapi-idempotency-key-
// header), GET /v1/messages/{consumer}/{id} returns its recorded outcome,
// and Prefer: wait=N (RFC 7240) holds either answer until the workflow
// closes.
//
// It is one more source of the intake: decode → inbox (group commit) →
// start. The Idempotency-Key is the message ID, so the inbox's primary key
// is the idempotency record and a retry is a copy: it gets the first
// answer (202, rebuilt from the inbox, not stored apart), plus the outcome
// once recorded. A key reused with another payload is quarantined as
// payload_mismatch (422); a retry while the first request of this process
// has not finished is 409; Postgres unreachable is 503 with Retry-After and
// no row. Refusals are RFC 9457 problem documents (Problem).
//
// The API is closed by default: no address, no listener; with one, every
// request needs a bearer token from a file of SHA-256 hashes, each bound to
// the message types it may submit, read again when the file changes, and
// limited per token. docs/intake.md has the contract, docs/openapi.yaml the
// schema.
package httpapi
