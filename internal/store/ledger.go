package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Effect kinds, as stored in effects.kind.
const (
	KindPayment = "payment"
	KindEmail   = "email"
)

// Effect states. A row moves claimed → in_flight → succeeded | failed |
// unknown; the three last are terminal.
const (
	StateClaimed   = "claimed"
	StateInFlight  = "in_flight"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateUnknown   = "unknown"
)

// EffectClaim asks for ownership of one effect's ledger row.
type EffectClaim struct {
	Key         string // idempotency key, e.g. "payment:evt_91c2"
	Kind        string // KindPayment or KindEmail
	Consumer    string
	MessageID   string
	RequestHash string // hash of the request the key stands for
	Attempt     int32  // the activity attempt claiming the row
	// State is the state to claim into: StateClaimed, or StateInFlight for an
	// effect that is recorded as in flight before the call (at-most-once).
	State string
}

// Effect is one ledger row.
type Effect struct {
	Key         string          `json:"key"`
	Kind        string          `json:"kind"`
	Consumer    string          `json:"consumer"`
	MessageID   string          `json:"message_id"`
	State       string          `json:"state"`
	Attempt     int32           `json:"attempt"`
	ProviderRef string          `json:"provider_ref,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// Terminal reports whether the effect's outcome is settled.
func (e Effect) Terminal() bool {
	return e.State == StateSucceeded || e.State == StateFailed || e.State == StateUnknown
}

const effectColumns = `key, kind, consumer, message_id, state, attempt, coalesce(provider_ref, ''), result, coalesce(error, ''), created_at, updated_at`

func scanEffect(row pgx.Row) (Effect, error) {
	var e Effect
	err := row.Scan(&e.Key, &e.Kind, &e.Consumer, &e.MessageID, &e.State, &e.Attempt, &e.ProviderRef, &e.Result, &e.Error, &e.CreatedAt, &e.UpdatedAt)
	return e, translate(err)
}

// claimEffect takes the ledger row for c.Key for attempt c.Attempt, creating
// it if needed. It returns the row as it now stands and whether this attempt
// owns it. A terminal row is never claimed; a row held by a newer attempt is
// not taken (the caller is a zombie); a row for a different request is
// ErrMismatch.
func claimEffect(ctx context.Context, tx pgx.Tx, c EffectClaim) (Effect, bool, error) {
	row := tx.QueryRow(ctx, `
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, attempt)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (key) DO UPDATE
		   SET attempt = EXCLUDED.attempt, state = EXCLUDED.state, updated_at = now()
		 WHERE effects.state IN ('claimed', 'in_flight')
		   AND effects.attempt <= EXCLUDED.attempt
		   AND effects.request_sha256 = EXCLUDED.request_sha256
		RETURNING `+effectColumns,
		c.Key, c.Kind, c.Consumer, c.MessageID, c.RequestHash, c.State, c.Attempt)
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

func scanEffectWithHash(row pgx.Row, hash *string) (Effect, error) {
	var e Effect
	err := row.Scan(&e.Key, &e.Kind, &e.Consumer, &e.MessageID, &e.State, &e.Attempt, &e.ProviderRef, &e.Result, &e.Error, &e.CreatedAt, &e.UpdatedAt, hash)
	return e, translate(err)
}

// settleEffect moves the row for key from a non-terminal state held by
// attempt to state. If the row is already in that state with the same
// provider reference (a retry of a record that committed), it reports
// already=true. Anything else is ErrFenced.
func settleEffect(ctx context.Context, tx pgx.Tx, key string, attempt int32, state, providerRef string, result any, errText string) (already bool, err error) {
	var res []byte
	if result != nil {
		if res, err = json.Marshal(result); err != nil {
			return false, fmt.Errorf("encode result of %s: %w", key, err)
		}
	}
	tag, err := tx.Exec(ctx, `
		UPDATE effects
		   SET state = $3, provider_ref = nullif($4, ''), result = $5, error = nullif($6, ''), updated_at = now()
		 WHERE key = $1 AND attempt = $2 AND state IN ('claimed', 'in_flight')`,
		key, attempt, state, providerRef, res, errText)
	if err != nil {
		return false, fmt.Errorf("settle effect %s: %w", key, translate(err))
	}
	if tag.RowsAffected() == 1 {
		return false, nil
	}
	e, err := scanEffect(tx.QueryRow(ctx, `SELECT `+effectColumns+` FROM effects WHERE key = $1`, key))
	if err != nil {
		return false, fmt.Errorf("read effect %s: %w", key, err)
	}
	if e.State == state && e.ProviderRef == providerRef {
		return true, nil
	}
	return false, fmt.Errorf("settle effect %s as %s at attempt %d (row is %s at attempt %d): %w", key, state, attempt, e.State, e.Attempt, ErrFenced)
}

// Effect returns the ledger row for key.
func (s *Store) Effect(ctx context.Context, key string) (Effect, error) {
	e, err := scanEffect(s.pool.QueryRow(ctx, `SELECT `+effectColumns+` FROM effects WHERE key = $1`, key))
	if err != nil {
		return Effect{}, fmt.Errorf("effect %s: %w", key, err)
	}
	return e, nil
}
