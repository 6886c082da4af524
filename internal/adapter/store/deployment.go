package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively/effectively/internal/leaf/identity"
)

// keyNamespaceSetting is the deployment row that records the key namespace.
const keyNamespaceSetting = "key_namespace"

// openExamples is how many message IDs of each kind of open effect a
// refusal names, oldest first.
const openExamples = 5

// ErrKeyNamespaceInUse reports a key namespace that differs from the one
// recorded while effects made under the recorded one are still open;
// *KeyNamespaceError holds the values and the counts.
var ErrKeyNamespaceInUse = errors.New("the key namespace changed while effects are open")

// OpenEffects counts the effects whose outcome is not final: the ones a
// retry would make again with its keys.
type OpenEffects struct {
	// Payments, Refunds and Receipts count the open payments, refunds and
	// mails (order and refund receipts), as openEffectsSQL defines them.
	Payments, Refunds, Receipts int64
	// PaymentMessages, RefundMessages and ReceiptMessages are the message
	// IDs of the oldest few of each, for `starter status`.
	PaymentMessages, RefundMessages, ReceiptMessages []string
}

// Total is the number of open effects.
func (o OpenEffects) Total() int64 { return o.Payments + o.Refunds + o.Receipts }

// KeyNamespaceError is the refusal of GuardKeyNamespace.
type KeyNamespaceError struct {
	// Recorded is the namespace the database holds ("" when no worker with
	// the guard started before: earlier binaries used unscoped keys),
	// Configured the one this process was given. Neither is a secret.
	Recorded, Configured string
	Open                 OpenEffects
}

// Error names both values, counts what blocks the change and says how to
// drain it.
func (e *KeyNamespaceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the key namespace recorded in the database is %q and the configured one is %q, "+
		"but %s, %s and %s made under %q are still open",
		e.Recorded, e.Configured,
		plural(e.Open.Payments, "payment"), plural(e.Open.Refunds, "refund"), plural(e.Open.Receipts, "receipt"),
		e.Recorded)
	var oldest []string
	for _, k := range []struct {
		kind string
		ids  []string
	}{{"payments", e.Open.PaymentMessages}, {"refunds", e.Open.RefundMessages}, {"receipts", e.Open.ReceiptMessages}} {
		if len(k.ids) > 0 {
			oldest = append(oldest, k.kind+" of messages "+strings.Join(k.ids, ", "))
		}
	}
	if len(oldest) > 0 {
		fmt.Fprintf(&b, " (the oldest: %s)", strings.Join(oldest, "; "))
	}
	fmt.Fprintf(&b, "; retried under %q their keys would be new requests at Stripe (a second refund, a second PaymentIntent). "+
		"Drain first: run the workers with the recorded namespace %q until every one is final "+
		"(`starter payments`, `starter status`, `starter resolve`; docs/runbook.md, \"Changing the key namespace\"), "+
		"then start with the new one", e.Configured, e.Recorded)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrKeyNamespaceInUse) true.
func (e *KeyNamespaceError) Unwrap() error { return ErrKeyNamespaceInUse }

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// KeyNamespaceCheck is what GuardKeyNamespace found and did.
type KeyNamespaceCheck struct {
	// Recorded is the namespace recorded before this start; HadRecord is
	// false when there was none (a new database, or one of a binary before
	// the guard): Recorded is then "".
	Recorded  string
	HadRecord bool
	// Changed reports that the configured namespace differed from Recorded
	// and, no effect being open, replaced it.
	Changed bool
}

// GuardKeyNamespace keeps the key namespace from changing under effects in
// flight. It records configured as the deployment's key namespace unless
// another one is recorded and effects made under it are still open (see
// OpenEffects): then it changes nothing and returns a *KeyNamespaceError.
// A database without a record counts as recorded "", the namespace of every
// binary before the guard, so the first start of an existing deployment
// with the default stores "" whatever is open, and one that sets a
// namespace in the same upgrade is held to the same rule as any change.
//
// The check and the record are one transaction holding the record's row
// lock, so workers starting at once with different values agree: the
// later one sees the earlier one's value and is refused or takes over by
// the same rule. It sees the effects recorded when it runs: a worker still
// running with the old value can open new ones afterwards, so the old
// value's workers must be stopped before the change (docs/runbook.md).
func GuardKeyNamespace(ctx context.Context, pool *pgxpool.Pool, configured string) (KeyNamespaceCheck, error) {
	var res KeyNamespaceCheck
	err := WithTx(ctx, pool, func(tx pgx.Tx) error {
		// No record yet: write "" (what earlier binaries used), so that
		// there is a row to lock. A concurrent start's insert waits for
		// this transaction and then finds the row.
		var inserted bool
		err := tx.QueryRow(ctx, `INSERT INTO deployment (name, value) VALUES ($1, '') ON CONFLICT (name) DO NOTHING RETURNING true`,
			keyNamespaceSetting).Scan(&inserted)
		if err = translate(err); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("record key namespace: %w", err)
		}
		res.HadRecord = !inserted
		if err := tx.QueryRow(ctx, `SELECT value FROM deployment WHERE name = $1 FOR UPDATE`, keyNamespaceSetting).
			Scan(&res.Recorded); err != nil {
			return fmt.Errorf("read key namespace: %w", translate(err))
		}
		if res.Recorded == configured {
			return nil
		}
		open, err := openEffects(ctx, tx)
		if err != nil {
			return err
		}
		if open.Total() > 0 {
			return &KeyNamespaceError{Recorded: res.Recorded, Configured: configured, Open: open}
		}
		if _, err := tx.Exec(ctx, `UPDATE deployment SET value = $2, changed_at = now() WHERE name = $1`,
			keyNamespaceSetting, configured); err != nil {
			return fmt.Errorf("record key namespace: %w", translate(err))
		}
		res.Changed = true
		return nil
	})
	if err != nil {
		return KeyNamespaceCheck{}, err
	}
	return res, nil
}

// RecordedKeyNamespace returns the key namespace recorded in the database,
// and false when none is.
func RecordedKeyNamespace(ctx context.Context, db DBTX) (string, bool, error) {
	var v string
	err := translate(db.QueryRow(ctx, `SELECT value FROM deployment WHERE name = $1`, keyNamespaceSetting).Scan(&v))
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, ErrNotFound):
		return "", false, nil
	default:
		return "", false, fmt.Errorf("read key namespace: %w", err)
	}
}

// openEffectsSQL counts the open effects of each kind and names the oldest:
// payments not succeeded or failed (payments_open_idx), refunds claimed, and
// mails whose ledger row is claimed or in flight (an unknown mail is final:
// it is never sent again).
const openEffectsSQL = `
	SELECT 'payment', count(*), (array_agg(message_id ORDER BY updated_at))[1:$1]
	  FROM payments WHERE state IN ('claimed', 'processing', 'unknown', 'unexpected')
	UNION ALL
	SELECT 'refund', count(*), (array_agg(message_id ORDER BY updated_at))[1:$1]
	  FROM refunds WHERE state = 'claimed'
	UNION ALL
	SELECT 'receipt', count(*), (array_agg(message_id ORDER BY updated_at))[1:$1]
	  FROM effects WHERE kind = 'email' AND state IN ('claimed', 'in_flight')`

// OpenEffectsRow names the row of openEffectsSQL that counts the open
// cases of effect e, and false for an effect the guard does not count. A
// route's effects must all be counted (internal/intake/route's TestChecklist).
func OpenEffectsRow(e identity.Effect) (string, bool) {
	switch e {
	case identity.EffectPayment, identity.EffectPaymentIntent:
		return "payment", true // one payments row holds both keys
	case identity.EffectRefund:
		return "refund", true
	case identity.EffectEmail, identity.EffectRefundEmail, identity.EffectOrderEmail:
		return "receipt", true // both are effects rows of kind email
	}
	return "", false
}

func openEffects(ctx context.Context, db DBTX) (OpenEffects, error) {
	var o OpenEffects
	rows, err := db.Query(ctx, openEffectsSQL, openExamples)
	if err != nil {
		return o, fmt.Errorf("count open effects: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind string
			n    int64
			ids  []string
		)
		if err := rows.Scan(&kind, &n, &ids); err != nil {
			return o, fmt.Errorf("count open effects: %w", translate(err))
		}
		switch kind {
		case "payment":
			o.Payments, o.PaymentMessages = n, ids
		case "refund":
			o.Refunds, o.RefundMessages = n, ids
		case "receipt":
			o.Receipts, o.ReceiptMessages = n, ids
		}
	}
	if err := rows.Err(); err != nil {
		return o, fmt.Errorf("count open effects: %w", translate(err))
	}
	return o, nil
}
