package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EmailPolicy chooses which way the unavoidable window between a send and its
// record may fail. SendGrid accepts no idempotency key, so one of the two
// must be accepted.
type EmailPolicy string

// Email policies.
const (
	// AtLeastOnce sends, then records. A crash between the two repeats the
	// email on retry: the right trade-off for receipts.
	AtLeastOnce EmailPolicy = "at-least-once"
	// AtMostOnce records in_flight before sending. A retry that finds an
	// in_flight row cannot tell whether the send happened, so it marks the
	// email unknown and never resends: the email may be lost, never doubled.
	AtMostOnce EmailPolicy = "at-most-once"
)

// EmailClaim asks to send one email.
type EmailClaim struct {
	Consumer    string
	MessageID   string
	OrderID     int64
	Key         string // "email:<message id>"
	RequestHash string
	Attempt     int32
	Policy      EmailPolicy
}

// EmailDecision says what the email activity should do next.
type EmailDecision string

// Email decisions.
const (
	// EmailSend: send now, then record.
	EmailSend EmailDecision = "send"
	// EmailDone: the ledger already has an outcome; do not send.
	EmailDone EmailDecision = "done"
	// EmailUnknown: at-most-once found an earlier attempt in flight; the row
	// is now marked unknown and nothing is sent.
	EmailUnknown EmailDecision = "unknown"
	// EmailFenced: a newer attempt owns the row.
	EmailFenced EmailDecision = "fenced"
)

// ClaimEmail consults and claims the ledger row of an email before it is
// sent. Under AtMostOnce the in_flight state commits before the send.
func (s *Store) ClaimEmail(ctx context.Context, c EmailClaim) (EmailDecision, Effect, error) {
	var (
		decision EmailDecision
		effect   Effect
	)
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		if c.Policy == AtMostOnce {
			// An in_flight row left by an earlier attempt means a send may
			// have happened: settle it as unknown instead of sending again.
			e, err := scanEffect(tx.QueryRow(ctx, `
				UPDATE effects SET state = 'unknown', error = 'an earlier attempt may have sent it; not resent under at-most-once', updated_at = now()
				 WHERE key = $1 AND state = 'in_flight' AND attempt < $2
				RETURNING `+effectColumns, c.Key, c.Attempt))
			if err == nil {
				decision, effect = EmailUnknown, e
				return markReceipt(ctx, tx, c.OrderID, "unknown")
			}
			if !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("check email %s in flight: %w", c.Key, err)
			}
		}
		state := StateClaimed
		if c.Policy == AtMostOnce {
			state = StateInFlight
		}
		e, owned, err := claimEffect(ctx, tx, EffectClaim{
			Key: c.Key, Kind: KindEmail, Consumer: c.Consumer, MessageID: c.MessageID,
			RequestHash: c.RequestHash, Attempt: c.Attempt, State: state,
		})
		if err != nil {
			return err
		}
		effect = e
		switch {
		case owned:
			decision = EmailSend
			return markReceipt(ctx, tx, c.OrderID, "sending")
		case e.Terminal():
			decision = EmailDone
		default:
			decision = EmailFenced
		}
		return nil
	})
	return decision, effect, err
}

func markReceipt(ctx context.Context, tx pgx.Tx, orderID int64, status string) error {
	if _, err := tx.Exec(ctx, `UPDATE orders SET receipt_status = $2, updated_at = now() WHERE id = $1`, orderID, status); err != nil {
		return fmt.Errorf("mark receipt of order %d %s: %w", orderID, status, translate(err))
	}
	return nil
}

// RecordEmailSent records SendGrid's acceptance (its X-Message-Id) and the
// order's receipt status in one transaction. Idempotent; ErrFenced for a
// superseded attempt.
func (s *Store) RecordEmailSent(ctx context.Context, key string, attempt int32, orderID int64, providerMessageID string) (already bool, err error) {
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		already, err = settleEffect(ctx, tx, key, attempt, StateSucceeded, providerMessageID, map[string]any{"x_message_id": providerMessageID}, "")
		if err != nil || already {
			return err
		}
		return markReceipt(ctx, tx, orderID, "sent")
	})
	return already, err
}

// RecordEmailFailed records a send SendGrid refused for good (an invalid
// address, say). Idempotent; ErrFenced for a superseded attempt.
func (s *Store) RecordEmailFailed(ctx context.Context, key string, attempt int32, orderID int64, reason string) (already bool, err error) {
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		already, err = settleEffect(ctx, tx, key, attempt, StateFailed, "", nil, reason)
		if err != nil || already {
			return err
		}
		return markReceipt(ctx, tx, orderID, "failed")
	})
	return already, err
}
