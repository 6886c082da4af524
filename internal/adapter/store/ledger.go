package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EffectKind is effects.kind.
type EffectKind string

// Effect kinds, as stored in effects.kind.
const (
	KindPayment EffectKind = "payment"
	KindEmail   EffectKind = "email"
	KindRefund  EffectKind = "refund"
)

// EffectState is effects.state.
type EffectState string

// Effect states. A row moves claimed → in_flight → succeeded | failed |
// unknown; the three last are terminal.
const (
	StateClaimed   EffectState = "claimed"
	StateInFlight  EffectState = "in_flight"
	StateSucceeded EffectState = "succeeded"
	StateFailed    EffectState = "failed"
	StateUnknown   EffectState = "unknown"
	// StateProcessing and StateUnexpected are a payment's open cases:
	// Stripe is processing it, or left it in a status nobody asked for.
	StateProcessing EffectState = "processing"
	StateUnexpected EffectState = "unexpected"
)

// EffectClaim asks for ownership of one effect's ledger row.
type EffectClaim struct {
	Key         string // idempotency key, e.g. "payment:evt_91c2"
	Kind        EffectKind
	Consumer    string
	MessageID   string
	RequestHash string // hash of the request the key stands for
	// State is the state to claim into: StateClaimed, or StateInFlight for an
	// effect that is recorded as in flight before the call (at-most-once).
	State EffectState
}

// Effect is one ledger row.
type Effect struct {
	Key       string      `json:"key"`
	Kind      EffectKind  `json:"kind"`
	Consumer  string      `json:"consumer"`
	MessageID string      `json:"message_id"`
	State     EffectState `json:"state"`
	// Claim is the fencing token: the number of the claim that owns the
	// row, counted by the database (1 for the first claim).
	Claim int32 `json:"claim"`
	// UnsentThrough is the last claim up to which no claim sent anything
	// (ReleaseEffect); Unsent reports whether that is every claim before
	// this one.
	UnsentThrough int32           `json:"unsent_through,omitempty"`
	ProviderRef   string          `json:"provider_ref,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         string          `json:"error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

// Unsent reports whether no claim before this one sent anything: the
// claim is as good as the first.
func (e Effect) Unsent() bool { return e.UnsentThrough == e.Claim-1 }

// Terminal reports whether the effect's outcome is settled.
func (e Effect) Terminal() bool {
	return e.State == StateSucceeded || e.State == StateFailed || e.State == StateUnknown
}

const effectColumns = `key, kind, consumer, message_id, state, claim, coalesce(provider_ref, ''), result, coalesce(error, ''), created_at, updated_at, unsent_through`

func scanEffect(row pgx.Row) (Effect, error) {
	var e Effect
	err := row.Scan(&e.Key, &e.Kind, &e.Consumer, &e.MessageID, &e.State, &e.Claim, &e.ProviderRef, &e.Result, &e.Error, &e.CreatedAt, &e.UpdatedAt, &e.UnsentThrough)
	return e, translate(err)
}

// claimEffectSQL creates the ledger row ($1 key, $2 kind, $3 consumer, $4
// message ID, $5 request hash, $6 state) under claim 1, or takes a
// non-terminal row for the same request over under the next claim.
const claimEffectSQL = `
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		VALUES ($1, $2, $3, $4, $5, $6, 1)` + takeOverEffect

// takeOverEffect ends an insert into effects: an existing row is taken
// over under the next claim when it is not terminal and stands for the
// same request.
const takeOverEffect = `
		ON CONFLICT (key) DO UPDATE
		   SET claim = effects.claim + 1, state = EXCLUDED.state, updated_at = now()
		 WHERE effects.state IN ('claimed', 'in_flight')
		   AND effects.request_sha256 = EXCLUDED.request_sha256`

// claimEffect takes the ledger row for c.Key, creating it if needed, and
// returns it as it now stands and whether this caller owns it. Each claim
// increments the row's claim number, the fencing token the caller settles
// with: a caller that claimed earlier (a timed-out attempt still running, a
// local activity abandoned for its regular fallback) can no longer settle
// the row. A terminal row is never claimed; a row for a different request is
// ErrMismatch.
func claimEffect(ctx context.Context, tx pgx.Tx, c EffectClaim) (Effect, bool, error) {
	row := tx.QueryRow(ctx, claimEffectSQL+` RETURNING `+effectColumns,
		c.Key, c.Kind, c.Consumer, c.MessageID, c.RequestHash, c.State)
	e, err := scanEffect(row)
	if err == nil {
		return e, true, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Effect{}, false, fmt.Errorf("claim effect %s: %w", c.Key, err)
	}
	// The row exists and was not taken: find out why.
	var hash string
	e, err = scanEffectWithHash(tx.QueryRow(ctx, `SELECT `+effectColumns+`, request_sha256 FROM effects WHERE key = $1 FOR UPDATE`, c.Key), &hash)
	if err != nil {
		return Effect{}, false, fmt.Errorf("read effect %s: %w", c.Key, err)
	}
	if hash != c.RequestHash {
		return e, false, fmt.Errorf("effect %s: %w", c.Key, ErrMismatch)
	}
	return e, false, nil
}

// lockEffectSQL locks the ledger row of $1, when it exists.
const lockEffectSQL = `SELECT FROM effects WHERE key = $1 FOR UPDATE`

// lockEffect locks the ledger row of key, when it exists, for the rest of
// tx: the first lock of every multi-statement transaction on an effect (see
// the package's lock order).
func lockEffect(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, lockEffectSQL, key); err != nil {
		return fmt.Errorf("lock effect %s: %w", key, translate(err))
	}
	return nil
}

func scanEffectWithHash(row pgx.Row, hash *string) (Effect, error) {
	var e Effect
	err := row.Scan(&e.Key, &e.Kind, &e.Consumer, &e.MessageID, &e.State, &e.Claim, &e.ProviderRef, &e.Result, &e.Error, &e.CreatedAt, &e.UpdatedAt, &e.UnsentThrough, hash)
	return e, translate(err)
}

func encodeResult(key string, result any) ([]byte, error) {
	if result == nil {
		return nil, nil
	}
	res, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("encode result of %s: %w", key, err)
	}
	return res, nil
}

// settledBefore explains a settle that matched no row: the same outcome
// already recorded (already=true), or ErrFenced.
func (s *Store) settledBefore(ctx context.Context, key string, claim int32, state EffectState, providerRef string) (already bool, err error) {
	e, err := scanEffect(s.pool.QueryRow(ctx, `SELECT `+effectColumns+` FROM effects WHERE key = $1`, key))
	if err != nil {
		return false, fmt.Errorf("read effect %s: %w", key, err)
	}
	if e.State == state && e.ProviderRef == providerRef {
		return true, nil
	}
	return false, fmt.Errorf("settle effect %s as %s under claim %d (row is %s under claim %d): %w", key, state, claim, e.State, e.Claim, ErrFenced)
}

// settleCTE is the first part of a statement that settles a ledger row and,
// only when that matched ($1 key, $2 claim, $3 state, $4 provider
// reference, $5 result, $6 error text), changes what the outcome changes in
// the same statement: a single statement is a transaction of its own, and
// costs one round trip instead of one per change.
const settleCTE = `
	WITH settled AS (
		UPDATE effects
		   SET state = $3, provider_ref = nullif($4::text, ''), result = $5::jsonb, error = nullif($6::text, ''), updated_at = now()
		 WHERE key = $1 AND claim = $2 AND state IN ('claimed', 'in_flight')
		RETURNING key
	)`

// settleAnd runs a statement made of settleCTE, further CTEs (which must
// test EXISTS (SELECT FROM settled)) and the final "SELECT count(*) FROM
// settled", with args appended after the settle's six.
func (s *Store) settleAnd(ctx context.Context, stmt, key string, claim int32, state EffectState, providerRef string, result any, errText string, args ...any) (already bool, err error) {
	res, err := encodeResult(key, result)
	if err != nil {
		return false, err
	}
	var n int
	all := append([]any{key, claim, state, providerRef, res, errText}, args...)
	if err := s.pool.QueryRow(ctx, stmt, all...).Scan(&n); err != nil {
		return false, fmt.Errorf("settle effect %s: %w", key, translate(err))
	}
	if n == 1 {
		return false, nil
	}
	return s.settledBefore(ctx, key, claim, state, providerRef)
}

// ReleaseEffect gives back claim of key's row, whose request was never sent
// (the shared rate limit had no slot in time, its attempt's deadline was too
// near): an in_flight row is claimed again, so that at-most-once does not
// take the next claim for a send that may have happened, and when no claim
// before it sent anything either, the row's UnsentThrough moves up to it, so
// that the next claim (Effect.Unsent) calls at once instead of looking for
// an earlier send. ErrFenced when claim no longer owns the row.
func (s *Store) ReleaseEffect(ctx context.Context, key string, claim int32) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE effects SET state = 'claimed',
		       unsent_through = CASE WHEN unsent_through = claim - 1 THEN claim ELSE unsent_through END,
		       updated_at = now()
		 WHERE key = $1 AND claim = $2 AND state IN ('claimed', 'in_flight')`, key, claim)
	if err != nil {
		return fmt.Errorf("release effect %s: %w", key, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("release effect %s under claim %d: %w", key, claim, ErrFenced)
	}
	return nil
}

// Effect returns the ledger row for key.
func (s *Store) Effect(ctx context.Context, key string) (Effect, error) {
	e, err := scanEffect(s.pool.QueryRow(ctx, `SELECT `+effectColumns+` FROM effects WHERE key = $1`, key))
	if err != nil {
		return Effect{}, fmt.Errorf("effect %s: %w", key, err)
	}
	return e, nil
}

// CountUnfound counts one more lookup of the effect key, under claim, that
// found nothing at the provider, and returns how many have: an ambiguous
// create is taken as not created only after enough of them (attempts that
// never reached the provider do not count). ErrFenced for a superseded
// claim.
func (s *Store) CountUnfound(ctx context.Context, key string, claim int32) (int32, error) {
	var n int32
	err := s.pool.QueryRow(ctx, `UPDATE effects SET unfound = unfound + 1, updated_at = now()
		WHERE key = $1 AND claim = $2 RETURNING unfound`, key, claim).Scan(&n)
	if err = translate(err); errors.Is(err, ErrNotFound) {
		return 0, fmt.Errorf("count a lookup of %s that found nothing under claim %d: %w", key, claim, ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("count a lookup of %s that found nothing: %w", key, err)
	}
	return n, nil
}
