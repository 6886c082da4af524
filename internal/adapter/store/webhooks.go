package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Receipt statuses (orders.receipt_status). Sent is the Mail Send API's 202
// or SendGrid's processed event; the last three come only from SendGrid's
// Event Webhook.
const (
	ReceiptSent      = "sent"
	ReceiptDelivered = "delivered"
	ReceiptBounced   = "bounced"
	ReceiptDropped   = "dropped"
)

// keepEventReceipt is the receipt status to write when the caller wants
// $new: a status only SendGrid's events set (delivered, bounced, dropped) is
// kept, so an activity's record or claim never moves it back.
func keepEventReceipt(newStatus string) string {
	return `CASE WHEN receipt_status IN ('delivered', 'bounced', 'dropped') THEN receipt_status ELSE ` + newStatus + ` END`
}

// receiptRank orders receipt statuses as SendGrid's events move them:
// an event only raises it, so copies and late events change nothing.
func receiptRank(expr string) string {
	return `(CASE ` + expr + ` WHEN 'sent' THEN 2 WHEN 'delivered' THEN 3 WHEN 'bounced' THEN 4 WHEN 'dropped' THEN 4 ELSE 1 END)`
}

// ProviderEvent is a verified provider event (a Stripe event, one SendGrid
// event of a batch) to record through the inbox.
type ProviderEvent struct {
	// Consumer is the inbox consumer: "stripe-events" or "sendgrid-events".
	Consumer string
	// EventID is the provider's event ID (evt_…, sg_event_id): the inbox's
	// message ID, so a copy of the event is a duplicate.
	EventID string
	// Payload is the event as received.
	Payload []byte
	// PayloadHash is the SHA-256 of Payload, hex.
	PayloadHash string
	// Source names where it came from, e.g. "webhook".
	Source string
}

// RecordProviderEvent inserts ev into the inbox and, only when it is new,
// runs apply in the same transaction: the event and what it settles commit
// together, or neither does. The row is inserted already settled (state
// dispatched, no workflow ID): the dispatcher never starts a workflow for a
// provider event. A copy only increments the row's duplicates counter and
// returns inserted=false without calling apply.
func (s *Store) RecordProviderEvent(ctx context.Context, ev ProviderEvent, apply func(ctx context.Context, tx pgx.Tx) error) (inserted bool, err error) {
	err = WithTx(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `
			INSERT INTO inbox (consumer, message_id, payload, payload_sha256, source, state, dispatched_at)
			VALUES ($1, $2, $3, $4, $5, 'dispatched', now())
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING 1`, ev.Consumer, ev.EventID, ev.Payload, ev.PayloadHash, ev.Source).Scan(&one)
		switch err = translate(err); {
		case errors.Is(err, ErrNotFound):
			if _, err := tx.Exec(ctx, `UPDATE inbox SET duplicates = duplicates + 1 WHERE consumer = $1 AND message_id = $2`,
				ev.Consumer, ev.EventID); err != nil {
				return fmt.Errorf("count copy of %s/%s: %w", ev.Consumer, ev.EventID, translate(err))
			}
			return nil
		case err != nil:
			return fmt.Errorf("insert event %s/%s: %w", ev.Consumer, ev.EventID, err)
		}
		inserted = true
		if apply == nil {
			return nil
		}
		return apply(ctx, tx)
	})
	return inserted, err
}

// PaymentEvent is what a payment_intent.* event reports.
type PaymentEvent struct {
	EventID   string
	EventType string
	// PaymentIntentID is the event's object.
	PaymentIntentID string
	// Key is "payment:<metadata.message_id>", the ledger key, when the
	// PaymentIntent carries a message ID; the row is found by either.
	Key string
	// Target is the ledger state the event reports: PaymentSucceeded,
	// PaymentProcessing or PaymentFailed.
	Target PaymentState
	// Status is the PaymentIntent's Stripe status.
	Status string
	// Amount and Currency are the PaymentIntent's; 0 and "" when the event
	// does not say. An event settles a payment only when they are the
	// payment's (see ApplyPaymentEvent).
	Amount   int64
	Currency string
	// PaymentMethod is the PaymentIntent's payment method ID ("" if not
	// said); RequestedTestPaymentMethod the test alias its metadata names,
	// which Stripe resolves into a new ID.
	PaymentMethod              string
	RequestedTestPaymentMethod string
	// Namespace is the key namespace the PaymentIntent's metadata names
	// ("" for none).
	Namespace      string
	ChargeID       string
	FailureCode    string
	DeclineCode    string
	FailureMessage string
}

// PaymentEventResult is what ApplyPaymentEvent did.
type PaymentEventResult struct {
	// Payment is the matching payments row as it stands after the event;
	// nil when no row matches.
	Payment *Payment
	// Applied is true when the event changed the ledger.
	Applied bool
	// Anomaly is true when the event contradicted the ledger or the
	// request and was kept in payment_anomalies instead.
	Anomaly bool
	// Foreign is true when the event names another key namespace than the
	// one recorded in the database: nothing was looked at or changed.
	Foreign bool
}

// ApplyPaymentEvent settles the payment ledger from a Stripe event, inside
// tx (RecordProviderEvent's). The event is checked against the request
// first, whatever is recorded: an event of another key namespace than the
// one recorded in the database changes nothing; a PaymentIntent other than
// the recorded one, or of another amount, currency or payment method than
// the request's, is kept as an anomaly and settles nothing. Then every
// change is a compare-and-set that never moves backwards:
//
//   - succeeded settles claimed, processing and unknown rows like the
//     activity's own record (order paid, processed row, order.paid outbox
//     event); on a failed row it is a contradiction, and on an unexpected
//     row (a PaymentIntent in a status or of a kind nobody asked for) an
//     operator's decision: both are kept as anomalies.
//   - processing moves only an unknown row (the activity records its own
//     answers; a late processing never touches a final row).
//   - failed (payment_failed, canceled) settles claimed, processing,
//     unknown and unexpected rows like a decline; after succeeded it is an
//     anomaly, not applied.
func ApplyPaymentEvent(ctx context.Context, tx pgx.Tx, ev PaymentEvent) (PaymentEventResult, error) {
	var res PaymentEventResult
	if ns, recorded, err := RecordedKeyNamespace(ctx, tx); err != nil {
		return res, fmt.Errorf("payment event %s: %w", ev.EventID, err)
	} else if recorded && ns != ev.Namespace {
		// Another deployment's PaymentIntent: not ours, whatever it names.
		res.Foreign = true
		return res, nil
	}
	p, err := scanPayment(tx.QueryRow(ctx, `
		SELECT `+paymentColumns+` FROM payments
		 WHERE payment_intent_id = $1 OR idempotency_key = $2
		 ORDER BY (payment_intent_id = $1) DESC NULLS LAST LIMIT 1`, ev.PaymentIntentID, ev.Key))
	if errors.Is(err, ErrNotFound) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("find payment of %s: %w", ev.PaymentIntentID, err)
	}
	// The ledger row, then the payment: the package's lock order.
	if err := lockEffect(ctx, tx, p.Key); err != nil {
		return res, err
	}
	if p, err = scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE consumer = $1 AND message_id = $2 FOR UPDATE`,
		p.Consumer, p.MessageID)); err != nil {
		return res, fmt.Errorf("lock payment of %s: %w", p.MessageID, err)
	}
	res.Payment = &p
	anomaly := func(detail string) (PaymentEventResult, error) {
		if _, err := tx.Exec(ctx, `
			INSERT INTO payment_anomalies (event_id, event_type, payment_intent_id, consumer, message_id, recorded_state, reported_status, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (event_id) DO NOTHING`,
			ev.EventID, ev.EventType, ev.PaymentIntentID, p.Consumer, p.MessageID, p.State, ev.Status, detail); err != nil {
			return res, fmt.Errorf("record anomaly of %s: %w", ev.PaymentIntentID, translate(err))
		}
		res.Anomaly = true
		return res, nil
	}
	if p.PaymentIntentID != "" && p.PaymentIntentID != ev.PaymentIntentID {
		return anomaly(fmt.Sprintf("event for PaymentIntent %s; the ledger records %s for this message", ev.PaymentIntentID, p.PaymentIntentID))
	}
	// Whether the row was found by its recorded ID or by the message's key
	// (a claimed row has no ID yet: the activity records it with the
	// outcome), a PaymentIntent that differs from the request is not this
	// payment, as for the activity's own lookups.
	method, err := requestedPaymentMethod(ctx, tx, p.Consumer, p.MessageID)
	if err != nil {
		return res, err
	}
	if d := ev.differs(p, method); d != "" {
		return anomaly("event for PaymentIntent " + ev.PaymentIntentID + ", which differs from the payment of this message: " + d)
	}
	final := p.State == PaymentSucceeded || p.State == PaymentFailed
	switch ev.Target {
	case PaymentSucceeded:
		switch p.State {
		case PaymentSucceeded:
			return res, nil
		case PaymentFailed:
			return anomaly("Stripe reports the payment succeeded; the ledger records it failed (money may have moved: refund or re-deliver)")
		case PaymentUnexpected:
			return anomaly("Stripe reports the payment succeeded; the ledger records it unexpected (" + p.FailureMessage + "): not applied, `starter resolve` re-reads and checks it")
		case PaymentClaimed, PaymentProcessing, PaymentUnknown:
			// Open: the event settles it below.
		}
		result := map[string]any{"payment_intent_id": ev.PaymentIntentID, "charge_id": ev.ChargeID, "settled_by": ev.EventID}
		event := map[string]any{
			"type": "order.paid", "order_id": p.OrderID, "message_id": p.MessageID,
			"payment_intent_id": ev.PaymentIntentID, "amount": p.Amount, "currency": p.Currency,
		}
		if err := settleFromEvent(ctx, tx, settlePaidSQL, p, ev, StateSucceeded, result, "",
			ev.ChargeID, OrderPaidEventID(p.MessageID), event); err != nil {
			return res, err
		}
	case PaymentFailed:
		if p.State == PaymentFailed {
			return res, nil
		}
		if p.State == PaymentSucceeded {
			return anomaly("Stripe reports " + ev.EventType + " after the ledger recorded the payment succeeded; not applied")
		}
		result := map[string]any{"code": ev.FailureCode, "decline_code": ev.DeclineCode, "settled_by": ev.EventID}
		if err := settleFromEvent(ctx, tx, settleRefusedSQL, p, ev, StateFailed, result, ev.FailureMessage,
			ev.FailureCode, ev.DeclineCode); err != nil {
			return res, err
		}
	case PaymentProcessing:
		if final || p.State != PaymentUnknown {
			return res, nil
		}
		if err := settleFromEvent(ctx, tx, settleProcessingSQL, p, ev, StateProcessing, nil, ""); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("payment event %s: unknown target state %q", ev.EventID, ev.Target)
	}
	p, err = scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE consumer = $1 AND message_id = $2`, p.Consumer, p.MessageID))
	if err != nil {
		return res, fmt.Errorf("read payment of %s: %w", p.MessageID, err)
	}
	res.Payment, res.Applied = &p, true
	return res, nil
}

// differs says how the event's PaymentIntent differs from payment p,
// requested with payment method method ("" when the request is no longer
// recorded): "" when it does not. Amount and currency are compared when the
// event carries them; the payment method when both sides name one, a test
// alias through the metadata that keeps it (as payment.Charge.Differs).
func (ev PaymentEvent) differs(p Payment, method string) string {
	var diffs []string
	if ev.Amount != 0 && ev.Amount != p.Amount {
		diffs = append(diffs, fmt.Sprintf("amount %d, want %d", ev.Amount, p.Amount))
	}
	if ev.Currency != "" && !strings.EqualFold(ev.Currency, p.Currency) {
		diffs = append(diffs, fmt.Sprintf("currency %q, want %q", ev.Currency, strings.ToLower(p.Currency)))
	}
	if ev.PaymentMethod != "" && method != "" && ev.PaymentMethod != method &&
		!(strings.HasPrefix(method, "pm_card_") && ev.RequestedTestPaymentMethod == method) {
		diffs = append(diffs, "payment_method differs")
	}
	return strings.Join(diffs, "; ")
}

// requestedPaymentMethod returns the payment method the message (consumer,
// messageID) asked for, read from its inbox row; "" once that row is
// pruned or for a message that names none.
func requestedPaymentMethod(ctx context.Context, db DBTX, consumer, messageID string) (string, error) {
	var pm *string
	err := translate(db.QueryRow(ctx, `
		SELECT convert_from(payload, 'UTF8')::jsonb -> 'data' ->> 'payment_method'
		  FROM inbox WHERE consumer = $1 AND message_id = $2`, consumer, messageID).Scan(&pm))
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("payment method requested by %s: %w", messageID, err)
	case pm == nil:
		return "", nil
	}
	return *pm, nil
}

// RequestedPaymentMethod returns the payment method message (consumer,
// messageID) asked for, from its inbox row; "" once that row is pruned.
func (s *Store) RequestedPaymentMethod(ctx context.Context, consumer, messageID string) (string, error) {
	return requestedPaymentMethod(ctx, s.pool, consumer, messageID)
}

// settleFromEvent runs stmt, whose first CTE settles the effect row
// regardless of its claim ($1 key, $2 state, $3 provider reference, $4
// result, $5 error text) and whose further CTEs use $6 consumer, $7 message
// ID, $8 order ID and then args.
func settleFromEvent(ctx context.Context, tx pgx.Tx, stmt string, p Payment, ev PaymentEvent, state EffectState, result any, errText string, args ...any) error {
	res, err := encodeResult(p.Key, result)
	if err != nil {
		return err
	}
	all := append([]any{p.Key, state, ev.PaymentIntentID, res, errText, p.Consumer, p.MessageID, p.OrderID}, args...)
	if _, err := tx.Exec(ctx, stmt, all...); err != nil {
		return fmt.Errorf("settle payment of %s from %s: %w", p.MessageID, ev.EventID, translate(err))
	}
	return nil
}

// eventSettleCTE settles an effect row from a provider event: unlike
// settleCTE it needs no claim (the event is the provider's truth, whoever
// holds the row), but it never touches a final row.
const eventSettleCTE = `
	WITH settled AS (
		UPDATE effects
		   SET state = $2, provider_ref = nullif($3::text, ''), result = coalesce($4::jsonb, result),
		       error = nullif($5::text, ''), updated_at = now()
		 WHERE key = $1 AND state NOT IN ('succeeded', 'failed')
		RETURNING key
	)`

// eventOutcomeCTEs marks the order ($8) and inserts the processed row of
// the message ($6, $7) with outcome.
func eventOutcomeCTEs(outcome Outcome) string {
	return `, ord AS (
		UPDATE orders SET status = '` + string(outcome) + `', updated_at = now() WHERE id = $8
	), processed AS (
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		VALUES ($6, $7, '` + string(outcome) + `', $8)
		ON CONFLICT DO NOTHING
	)`
}

// settlePaidSQL: the payment succeeded ($9 charge ID, $10 outbox event ID,
// $11 event payload).
const settlePaidSQL = eventSettleCTE + `, paid AS (
		UPDATE payments SET state = 'succeeded', payment_intent_id = $3, charge_id = coalesce(nullif($9::text, ''), charge_id),
		       failure_message = NULL, updated_at = now()
		 WHERE consumer = $6 AND message_id = $7
	)` + `, ord AS (
		UPDATE orders SET status = 'paid', updated_at = now() WHERE id = $8
	), processed AS (
		INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		VALUES ($6, $7, 'paid', $8)
		ON CONFLICT DO NOTHING
	), event AS (
		INSERT INTO outbox (event_id, topic, payload) VALUES ($10, 'order.paid', $11::jsonb)
		ON CONFLICT (event_id) DO NOTHING
	)
	SELECT count(*) FROM settled`

// settleRefusedSQL: the payment failed ($9 failure code, $10 decline code).
var settleRefusedSQL = eventSettleCTE + `, refused AS (
		UPDATE payments SET state = 'failed', payment_intent_id = $3, failure_code = nullif($9::text, ''),
		       decline_code = nullif($10::text, ''), failure_message = nullif($5::text, ''), updated_at = now()
		 WHERE consumer = $6 AND message_id = $7
	)` + eventOutcomeCTEs(OutcomePaymentFailed) + `
	SELECT count(*) FROM settled`

// settleProcessingSQL: an unknown payment is in fact processing. $8 is
// unused but keeps the parameter list of the others.
const settleProcessingSQL = eventSettleCTE + `, proc AS (
		UPDATE payments SET state = 'processing', payment_intent_id = $3, failure_message = NULL, updated_at = now()
		 WHERE consumer = $6 AND message_id = $7 AND $8::bigint IS NOT NULL
	)
	SELECT count(*) FROM settled`

// RefundEvent is what a charge.refunded event reports.
type RefundEvent struct {
	EventID         string
	ChargeID        string
	PaymentIntentID string
	Key             string // as in PaymentEvent
	AmountRefunded  int64
	Currency        string
	Refunded        bool // fully refunded
}

// ApplyRefundEvent records a charge.refunded event in stripe_refunds,
// linked to the message whose payment it refunds when one matches.
func ApplyRefundEvent(ctx context.Context, tx pgx.Tx, ev RefundEvent) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO stripe_refunds (event_id, charge_id, payment_intent_id, consumer, message_id, amount_refunded, currency, refunded)
		SELECT $1, $2, nullif($3::text, ''), p.consumer, p.message_id, $5, $6, $7
		  FROM (SELECT 1) AS one
		  LEFT JOIN LATERAL (
		        SELECT consumer, message_id FROM payments
		         WHERE payment_intent_id = nullif($3::text, '') OR idempotency_key = $4 OR charge_id = $2
		         LIMIT 1) AS p ON true
		ON CONFLICT (event_id) DO NOTHING`,
		ev.EventID, ev.ChargeID, ev.PaymentIntentID, ev.Key, ev.AmountRefunded, ev.Currency, ev.Refunded)
	if err != nil {
		return fmt.Errorf("record refund %s of charge %s: %w", ev.EventID, ev.ChargeID, translate(err))
	}
	return nil
}

// EmailEvent is one SendGrid event about a mail effectively sent.
type EmailEvent struct {
	SGEventID string
	// Key is the mail's custom_args.idempotency_key ("email:<message id>").
	Key string
	// Event is SendGrid's event name: processed, delivered, bounce, …
	Event       string
	SGMessageID string
	Reason      string
	OccurredAt  time.Time
}

// ReceiptStatusOf maps a SendGrid event to the receipt status it reports,
// or "" for an event that says nothing about delivery (unsubscribe, …).
func ReceiptStatusOf(event string) string {
	switch event {
	case "processed", "deferred":
		return ReceiptSent
	case "delivered", "open", "click", "spamreport":
		return ReceiptDelivered
	case "bounce", "blocked":
		return ReceiptBounced
	case "dropped":
		return ReceiptDropped
	}
	return ""
}

// EmailEventResult is what ApplyEmailEvent did.
type EmailEventResult struct {
	// Settled is true when an unknown receipt (at-most-once) became sent.
	Settled bool
	// ReceiptChanged is true when the order's receipt status moved.
	ReceiptChanged bool
}

// ApplyEmailEvent records one SendGrid event inside tx: the event row (read
// by SendReceipt's grace wait), the order's receipt status, raised only
// (processed → sent → delivered → bounced/dropped), and, for a receipt
// recorded unknown under at-most-once, the send it proves.
func ApplyEmailEvent(ctx context.Context, tx pgx.Tx, ev EmailEvent) (EmailEventResult, error) {
	var res EmailEventResult
	var occurred *time.Time
	if !ev.OccurredAt.IsZero() {
		occurred = &ev.OccurredAt
	}
	status := ReceiptStatusOf(ev.Event)
	err := tx.QueryRow(ctx, `
		WITH ev AS (
			INSERT INTO email_events (sg_event_id, idempotency_key, event, sg_message_id, reason, occurred_at)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (sg_event_id) DO NOTHING
			RETURNING 1
		), eff AS (
			SELECT consumer, message_id FROM effects WHERE key = $2 AND kind = 'email'
		), settle AS (
			UPDATE effects SET state = 'succeeded', provider_ref = nullif(split_part($4::text, '.', 1), ''),
			       result = jsonb_build_object('x_message_id', split_part($4::text, '.', 1), 'settled_by', 'sendgrid ' || $3::text),
			       error = NULL, updated_at = now()
			 WHERE key = $2 AND state = 'unknown' AND $7::text <> '' AND EXISTS (SELECT FROM ev)
			RETURNING key
		), ord AS (
			UPDATE orders o SET receipt_status = $7, updated_at = now()
			  FROM payments p, eff
			 WHERE p.consumer = eff.consumer AND p.message_id = eff.message_id AND o.id = p.order_id
			   AND $7::text <> '' AND `+receiptRank("o.receipt_status")+` < `+receiptRank("$7::text")+`
			   AND EXISTS (SELECT FROM ev)
			RETURNING o.id
		)
		SELECT (SELECT count(*) FROM settle) > 0, (SELECT count(*) FROM ord) > 0`,
		ev.SGEventID, ev.Key, ev.Event, ev.SGMessageID, ev.Reason, occurred, status).Scan(&res.Settled, &res.ReceiptChanged)
	if err != nil {
		return res, fmt.Errorf("record sendgrid event %s for %s: %w", ev.SGEventID, ev.Key, translate(err))
	}
	return res, nil
}

// EmailAccepted reports whether SendGrid has sent any event proving that
// the mail under key was accepted (processed or anything after it), and
// the X-Message-Id part of its sg_message_id.
func (s *Store) EmailAccepted(ctx context.Context, key string) (xMessageID string, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `
		SELECT split_part(sg_message_id, '.', 1) FROM email_events
		 WHERE idempotency_key = $1
		   AND event IN ('processed', 'deferred', 'delivered', 'bounce', 'blocked', 'dropped', 'open', 'click', 'spamreport')
		 ORDER BY received_at LIMIT 1`, key).Scan(&xMessageID)
	if err = translate(err); errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("events of %s: %w", key, err)
	}
	return xMessageID, true, nil
}

// PaymentAnomaly is a payment_anomalies row.
type PaymentAnomaly struct {
	EventID         string    `json:"event_id"`
	EventType       string    `json:"event_type"`
	PaymentIntentID string    `json:"payment_intent_id"`
	Consumer        string    `json:"consumer,omitempty"`
	MessageID       string    `json:"message_id"`
	RecordedState   string    `json:"recorded_state"`
	ReportedStatus  string    `json:"reported_status"`
	Detail          string    `json:"detail"`
	ReceivedAt      time.Time `json:"received_at"`
	// ResolvedAt and Resolution are set once an operator resolved it,
	// Resolution with the operator's reason.
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	Resolution string     `json:"resolution,omitempty"`
}

const anomalyColumns = `event_id, event_type, payment_intent_id, coalesce(consumer, ''), coalesce(message_id, ''),
	recorded_state, reported_status, detail, received_at, resolved_at, coalesce(resolution, '')`

func scanAnomaly(row pgx.Row) (PaymentAnomaly, error) {
	var a PaymentAnomaly
	err := row.Scan(&a.EventID, &a.EventType, &a.PaymentIntentID, &a.Consumer, &a.MessageID, &a.RecordedState,
		&a.ReportedStatus, &a.Detail, &a.ReceivedAt, &a.ResolvedAt, &a.Resolution)
	return a, translate(err)
}

// OpenPaymentAnomalies lists the anomalies no operator has resolved yet,
// oldest first.
func (s *Store) OpenPaymentAnomalies(ctx context.Context, limit int) ([]PaymentAnomaly, error) {
	return s.PaymentAnomalies(ctx, false, limit)
}

// PaymentAnomalies lists the anomalies, oldest first: the open ones, or
// with all also those resolved.
func (s *Store) PaymentAnomalies(ctx context.Context, all bool, limit int) ([]PaymentAnomaly, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+anomalyColumns+` FROM payment_anomalies
		 WHERE $1 OR resolved_at IS NULL ORDER BY received_at, event_id LIMIT $2`, all, limit)
	if err != nil {
		return nil, fmt.Errorf("list payment anomalies: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PaymentAnomaly, error) { return scanAnomaly(r) })
	if err != nil {
		return nil, fmt.Errorf("list payment anomalies: %w", translate(err))
	}
	return out, nil
}

// ErrResolved is returned by ResolvePaymentAnomaly and ResolveFinding for
// a row resolved before: the first resolution and its reason stand.
var ErrResolved = errors.New("already resolved")

// ResolvePaymentAnomaly marks anomaly eventID resolved with the operator's
// reason, kept with the row. It changes nothing else: what the anomaly
// calls for (a refund, a redrive) is the operator's. An anomaly that does
// not exist is ErrNotFound; one resolved before is returned as it stands
// with ErrResolved.
func (s *Store) ResolvePaymentAnomaly(ctx context.Context, eventID, reason string) (PaymentAnomaly, error) {
	if strings.TrimSpace(reason) == "" {
		return PaymentAnomaly{}, fmt.Errorf("resolve anomaly %s: a reason is required", eventID)
	}
	a, err := scanAnomaly(s.pool.QueryRow(ctx, `
		UPDATE payment_anomalies SET resolved_at = now(), resolution = $2
		 WHERE event_id = $1 AND resolved_at IS NULL
		RETURNING `+anomalyColumns, eventID, reason))
	if !errors.Is(err, ErrNotFound) {
		if err != nil {
			return PaymentAnomaly{}, fmt.Errorf("resolve anomaly %s: %w", eventID, err)
		}
		return a, nil
	}
	a, err = scanAnomaly(s.pool.QueryRow(ctx, `SELECT `+anomalyColumns+` FROM payment_anomalies WHERE event_id = $1`, eventID))
	if err != nil {
		return PaymentAnomaly{}, fmt.Errorf("resolve anomaly %s: %w", eventID, err)
	}
	return a, fmt.Errorf("resolve anomaly %s: %w at %s", eventID, ErrResolved, a.ResolvedAt.UTC().Format(time.RFC3339))
}

// PaymentOfIntent returns the payment row that PaymentIntent piID, or the
// ledger key key, belongs to; nil when none does.
func (s *Store) PaymentOfIntent(ctx context.Context, piID, key string) (*Payment, error) {
	p, err := scanPayment(s.pool.QueryRow(ctx, `
		SELECT `+paymentColumns+` FROM payments
		 WHERE payment_intent_id = $1 OR idempotency_key = $2
		 ORDER BY (payment_intent_id = $1) DESC NULLS LAST LIMIT 1`, piID, key))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("payment of %s: %w", piID, err)
	}
	return &p, nil
}
