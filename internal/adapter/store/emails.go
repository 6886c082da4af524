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
	Consumer  string
	MessageID string
	// OrderID is the order whose receipt_status follows the mail; 0 for a
	// mail that is not the order's receipt (a refund receipt).
	OrderID     int64
	Key         string // "email:<message id>", "refundemail:<message id>"
	RequestHash string
	Policy      EmailPolicy
	// LegacyKey is the key an earlier release used for the same mail
	// ("email:<id>" for a refund receipt); a row of the consumer under it is
	// claimed instead of Key, with LegacyRequestHash (Effect.Key says which).
	LegacyKey         string
	LegacyRequestHash string
	// AltKey is the key claimed instead of Key, with AltRequestHash, when
	// Key's row is another consumer's ("orderemail:<id>" for an order
	// receipt whose "email:<id>" holds a refund receipt an earlier release
	// recorded there), or when a row of the consumer exists under AltKey:
	// once claimed, a mail keeps its key whatever becomes of the other row.
	AltKey         string
	AltRequestHash string
}

// resolve picks the key c claims, inside tx (as claimEmailSQL does):
// LegacyKey, then AltKey, then Key (see EmailClaim).
func (c EmailClaim) resolve(ctx context.Context, tx pgx.Tx) (EmailClaim, error) {
	if c.LegacyKey == "" && c.AltKey == "" {
		return c, nil
	}
	var key string
	if err := tx.QueryRow(ctx, `SELECT `+pickEmailKey("$1", "$2", "$3", "$4", "$5"), c.Key, KindEmail, c.Consumer, c.LegacyKey, c.AltKey).Scan(&key); err != nil {
		return c, fmt.Errorf("pick the key of email %s: %w", c.Key, translate(err))
	}
	switch key {
	case c.LegacyKey:
		c.Key, c.RequestHash = c.LegacyKey, c.LegacyRequestHash
	case c.AltKey:
		c.Key, c.RequestHash = c.AltKey, c.AltRequestHash
	}
	return c, nil
}

// pickEmailKey is the SQL of the key an email claim takes, from the
// parameters named (see EmailClaim): the legacy key when the consumer has a
// row there, the other key when the consumer has a row there or another
// consumer has one under key, else key.
func pickEmailKey(key, kind, consumer, legacy, alt string) string {
	return `CASE
		WHEN EXISTS (SELECT FROM effects WHERE key = ` + legacy + ` AND consumer = ` + consumer + ` AND kind = ` + kind + `) THEN ` + legacy + `::text
		WHEN ` + alt + `::text <> '' AND (EXISTS (SELECT FROM effects WHERE key = ` + alt + ` AND consumer = ` + consumer + ` AND kind = ` + kind + `)
		        OR EXISTS (SELECT FROM effects WHERE key = ` + key + ` AND consumer <> ` + consumer + `)) THEN ` + alt + `::text
		ELSE ` + key + `::text END`
}

// EmailDecision says what the email activity should do next.
type EmailDecision string

// Email decisions.
const (
	// EmailSend: send now, then record.
	EmailSend EmailDecision = "send"
	// EmailDone: the ledger already has an outcome; do not send.
	EmailDone EmailDecision = "done"
	// EmailUnknown: at-most-once found an earlier claim in flight; the row
	// is now marked unknown and nothing is sent.
	EmailUnknown EmailDecision = "unknown"
)

// ClaimEmail consults and claims the ledger row of an email before it is
// sent. Under AtMostOnce the in_flight state commits before the send. For
// EmailSend the returned Effect's Claim is the fencing token the record must
// present.
func (s *Store) ClaimEmail(ctx context.Context, c EmailClaim) (EmailDecision, Effect, error) {
	var (
		decision EmailDecision
		effect   Effect
	)
	if c.Policy != AtMostOnce {
		// The common case in one statement: the claim, and the order's
		// receipt marked sending. A row it cannot take (already settled,
		// or claimed for another request) is sorted out below.
		e, err := scanEffect(s.pool.QueryRow(ctx, claimEmailSQL, c.Key, KindEmail, c.Consumer, c.MessageID, c.RequestHash, StateClaimed, c.OrderID,
			c.LegacyKey, c.LegacyRequestHash, c.AltKey, c.AltRequestHash))
		if err == nil {
			return EmailSend, e, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return "", Effect{}, fmt.Errorf("claim email %s: %w", c.Key, err)
		}
	}
	err := WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		c, err := c.resolve(ctx, tx)
		if err != nil {
			return err
		}
		if c.Policy == AtMostOnce {
			// An in_flight row left by an earlier claim means a send may
			// have happened: settle it as unknown instead of sending again,
			// or as sent when SendGrid's Event Webhook already reported
			// the mail (an event names the key in custom_args).
			e, err := scanEffect(tx.QueryRow(ctx, `
				WITH ev AS (
					SELECT split_part(sg_message_id, '.', 1) AS x_message_id FROM email_events
					 WHERE idempotency_key = $1 ORDER BY received_at LIMIT 1
				)
				UPDATE effects SET
				       state = CASE WHEN EXISTS (SELECT FROM ev) THEN 'succeeded' ELSE 'unknown' END,
				       provider_ref = (SELECT nullif(x_message_id, '') FROM ev),
				       error = CASE WHEN EXISTS (SELECT FROM ev) THEN NULL ELSE 'an earlier attempt may have sent it; not resent under at-most-once' END,
				       updated_at = now()
				 WHERE key = $1 AND state = 'in_flight'
				RETURNING `+effectColumns, c.Key))
			if err == nil && e.State == StateSucceeded {
				decision, effect = EmailDone, e
				return markReceipt(ctx, tx, c.OrderID, ReceiptSent)
			}
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
			RequestHash: c.RequestHash, State: state,
		})
		if err != nil {
			return err
		}
		effect = e
		if !owned {
			// Only a terminal row is not taken: the outcome is recorded.
			decision = EmailDone
			return nil
		}
		decision = EmailSend
		return markReceipt(ctx, tx, c.OrderID, "sending")
	})
	return decision, effect, err
}

// claimEmailSQL is claimEffectSQL and, when it took the row, the order's
// ($7) receipt marked sending, in one statement. The key claimed is
// pickEmailKey's: the legacy key $8 with the request hash $9, or the other
// key $10 with $11, or $1 with $5 (see EmailClaim).
var claimEmailSQL = `WITH pick AS (
		SELECT ` + pickEmailKey("$1", "$2", "$3", "$8", "$10") + ` AS key
	), claimed AS (
		INSERT INTO effects (key, kind, consumer, message_id, request_sha256, state, claim)
		SELECT pick.key, $2, $3, $4,
		       CASE pick.key WHEN $8::text THEN $9::text WHEN $10::text THEN $11::text ELSE $5::text END, $6, 1 FROM pick` + takeOverEffect + ` RETURNING *
	), mark AS (
		UPDATE orders SET receipt_status = ` + keepEventReceipt("'sending'") + `, updated_at = now() WHERE id = $7 AND EXISTS (SELECT FROM claimed)
	)
	SELECT ` + effectColumns + ` FROM claimed`

func markReceipt(ctx context.Context, tx pgx.Tx, orderID int64, status string) error {
	if _, err := tx.Exec(ctx, `UPDATE orders SET receipt_status = `+keepEventReceipt("$2")+`, updated_at = now() WHERE id = $1`, orderID, status); err != nil {
		return fmt.Errorf("mark receipt of order %d %s: %w", orderID, status, translate(err))
	}
	return nil
}

// RecordEmailSent records SendGrid's acceptance (its X-Message-Id) and the
// order's receipt status in one statement, under the claim ClaimEmail
// returned. Idempotent; ErrFenced for a superseded claim.
func (s *Store) RecordEmailSent(ctx context.Context, key string, claim int32, orderID int64, providerMessageID string) (already bool, err error) {
	return s.settleAnd(ctx, settleReceiptSQL, key, claim, StateSucceeded, providerMessageID,
		map[string]any{"x_message_id": providerMessageID}, "", orderID, "sent")
}

// RecordEmailFailed records a send SendGrid refused for good (an invalid
// address, say). Idempotent; ErrFenced for a superseded claim.
func (s *Store) RecordEmailFailed(ctx context.Context, key string, claim int32, orderID int64, reason string) (already bool, err error) {
	return s.settleAnd(ctx, settleReceiptSQL, key, claim, StateFailed, "", nil, reason, orderID, "failed")
}

// settleReceiptSQL settles an email's ledger row and, in the same
// statement, sets the order's ($7) receipt status ($8).
var settleReceiptSQL = settleCTE + markReceiptSQL

// markReceiptSQL follows a settle CTE: see settleReceiptSQL.
var markReceiptSQL = `, mark AS (
		UPDATE orders SET receipt_status = ` + keepEventReceipt("$8") + `, updated_at = now() WHERE id = $7 AND EXISTS (SELECT FROM settled)
	)
	SELECT count(*) FROM settled`
