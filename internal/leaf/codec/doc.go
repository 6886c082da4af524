// Package codec keeps customers' data out of Temporal's history.
//
// Temporal stores every workflow and activity input and result, every
// summary and every failure in its history, in the clear unless the client
// encodes them first. This package provides a converter.PayloadCodec that
// encrypts each payload with AES-256-GCM before it leaves the process, and a
// codec server that lets the Temporal UI or CLI decrypt them for an operator
// who holds the codec server's bearer token.
//
// # What is guaranteed
//
// With NewDataConverter (and NewFailureConverter) installed on the client
// that starts workflows and on the client the worker is built from:
//
//   - Workflow inputs and results, activity inputs and results, signal and
//     query arguments, static summaries and details (user metadata) and
//     activity summaries reach the Temporal server only as ciphertext: an
//     email address or an amount in them is never stored in plaintext.
//   - With NewFailureConverter also installed, failure messages and stack
//     traces are encrypted too (they would otherwise carry error text, such as
//     "address \"ada@example.com\" is not valid", in the clear).
//   - A payload is sealed with a fresh random 12-byte nonce under the current
//     key, and its key ID travels in the payload's metadata, so keys rotate
//     without rewriting history: add a new current key and keep the old ones
//     in the keyring for as long as histories encrypted with them are kept
//     (the namespace's retention) and may be replayed.
//   - A payload altered in the server, or encrypted under a key this keyring
//     does not hold, fails to decode with an error; it is never silently
//     replaced.
//   - Payloads that are not encrypted pass through decoding unchanged, so
//     histories written before the codec was switched on still replay;
//     with RequireEncryption (EFFECTIVELY_CODEC_REQUIRE) they fail to decode
//     instead, with an error naming their encoding, never their contents.
//
// # What is not covered
//
// Ciphertext is not bound to its workflow: the SDK's PayloadCodec interface
// gives Encode and Decode only the payloads, no namespace, workflow or run
// ID to authenticate as associated data, so a payload copied from one
// history into another decrypts there.
//
// Search attributes, workflow IDs, run IDs, task queue names, workflow and
// activity type names, signal and query names, and activity IDs are not
// payloads that pass through the codec: the server needs them in the
// clear to index and route. Keep personal data out of them; effectively puts
// only message IDs, consumer names and order IDs there. Headers written by
// context propagators are not encrypted either.
//
// Key material is never printed: configuration errors name the variable, the
// entry and the key ID, never the key, and Key's String method redacts it.
//
// # Configuration
//
// LoadKeyring reads the keys from EFFECTIVELY_CODEC_KEYS (comma-separated
// "id:base64key" entries, the first being the current key) or from the file
// named by EFFECTIVELY_CODEC_KEY_FILE (the same entries, one per line). Each
// key is 32 random bytes in standard base64, as `openssl rand -base64 32`
// prints. LoadServerConfig reads the codec server's settings:
// EFFECTIVELY_CODEC_SERVER_ADDR, EFFECTIVELY_CODEC_CORS_ORIGINS and
// EFFECTIVELY_CODEC_TOKEN.
package codec
