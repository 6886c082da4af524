-- +goose Up
-- What the audit (internal/adapter/audit) found when it compared the ledger
-- with Stripe's and SendGrid's own records. One row per (kind, object): a
-- rerun that finds the same thing again only moves last_seen_at.
CREATE TABLE audit_findings (
    kind          text        NOT NULL,
    object        text        NOT NULL,
    consumer      text        NOT NULL DEFAULT '',
    message_id    text        NOT NULL DEFAULT '',
    order_id      bigint,
    stripe_ids    text[]      NOT NULL DEFAULT '{}',
    ledger_ref    text        NOT NULL DEFAULT '',
    detail        text        NOT NULL DEFAULT '',
    found_at      timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at   timestamptz,
    resolution    text,
    PRIMARY KEY (kind, object)
);
CREATE INDEX audit_findings_open_idx ON audit_findings (kind) WHERE resolved_at IS NULL;

-- Where a scheduled audit stands: every window before audited_until is
-- done; slice is the length of the windows it audits at a time (halved when
-- one did not fit in a run's Stripe request budget).
CREATE TABLE audit_checkpoints (
    name           text        PRIMARY KEY,
    audited_until  timestamptz NOT NULL,
    slice_seconds  bigint      NOT NULL CHECK (slice_seconds > 0),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- What the audit reads by time and by message: a slice's payments, refunds,
-- mails and SendGrid events, and the payments of the listed messages.
CREATE INDEX payments_created_at_idx ON payments (created_at);
CREATE INDEX payments_message_idx ON payments (message_id);
CREATE INDEX refunds_created_at_idx ON refunds (created_at);
CREATE INDEX effects_email_created_at_idx ON effects (created_at) WHERE kind = 'email';
CREATE INDEX email_events_received_at_idx ON email_events (received_at);

-- Outcome events: every terminal outcome of a message goes through the
-- outbox, in the transaction that records it, whichever path records it
-- (an activity, a webhook, `starter resolve`). order.paid keeps its own
-- insert (payments.go); the rest are written here, one per message, with
-- the event ID <topic>:<message ID>, so a repeat never emits a second.
-- +goose StatementBegin
CREATE FUNCTION outcome_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    topic text;
    payload jsonb;
BEGIN
    topic := CASE NEW.outcome
        WHEN 'payment_failed'         THEN 'order.payment_failed'
        WHEN 'business_duplicate'     THEN 'order.business_duplicate'
        WHEN 'refunded'               THEN 'refund.refunded'
        WHEN 'refund_failed'          THEN 'refund.failed'
        WHEN 'refund_exceeds_payment' THEN 'refund.refused'
        WHEN 'order_not_paid'         THEN 'refund.refused'
    END;
    IF topic IS NULL THEN
        RETURN NULL; -- paid: order.paid is written with the charge
    END IF;
    payload := jsonb_build_object('type', topic, 'consumer', NEW.consumer, 'message_id', NEW.message_id,
                                  'order_id', NEW.order_id, 'outcome', NEW.outcome);
    IF topic = 'order.payment_failed' THEN
        payload := payload || coalesce((SELECT jsonb_strip_nulls(jsonb_build_object('payment_intent_id', p.payment_intent_id,
                   'failure_code', p.failure_code, 'decline_code', p.decline_code))
              FROM payments p WHERE p.consumer = NEW.consumer AND p.message_id = NEW.message_id), '{}');
    ELSIF topic LIKE 'refund.%' THEN
        payload := payload || coalesce((SELECT jsonb_strip_nulls(jsonb_build_object('refund_id', r.refund_id,
                   'payment_intent_id', r.payment_intent_id, 'amount', r.amount, 'currency', r.currency))
              FROM refunds r WHERE r.consumer = NEW.consumer AND r.message_id = NEW.message_id), '{}');
    END IF;
    INSERT INTO outbox (event_id, topic, payload) VALUES (topic || ':' || NEW.message_id, topic, payload)
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER processed_messages_outcome_event AFTER INSERT ON processed_messages
    FOR EACH ROW EXECUTE FUNCTION outcome_event();

-- Receipt outcomes (an order's receipt and a refund receipt alike): the
-- mail's ledger row reaching succeeded or failed.
-- +goose StatementBegin
CREATE FUNCTION receipt_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    topic text;
BEGIN
    IF NEW.kind <> 'email' OR NEW.state NOT IN ('succeeded', 'failed')
       OR (TG_OP = 'UPDATE' AND OLD.state = NEW.state) THEN
        RETURN NULL;
    END IF;
    topic := CASE NEW.state WHEN 'succeeded' THEN 'receipt.sent' ELSE 'receipt.failed' END;
    INSERT INTO outbox (event_id, topic, payload)
    VALUES (topic || ':' || NEW.message_id, topic, jsonb_strip_nulls(jsonb_build_object('type', topic,
            'consumer', NEW.consumer, 'message_id', NEW.message_id, 'idempotency_key', NEW.key,
            'x_message_id', NEW.provider_ref, 'error', NEW.error)))
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER effects_receipt_event AFTER INSERT OR UPDATE OF state ON effects
    FOR EACH ROW EXECUTE FUNCTION receipt_event();

-- +goose Down
DROP INDEX email_events_received_at_idx;
DROP INDEX effects_email_created_at_idx;
DROP INDEX refunds_created_at_idx;
DROP INDEX payments_message_idx;
DROP INDEX payments_created_at_idx;
DROP TRIGGER effects_receipt_event ON effects;
DROP FUNCTION receipt_event();
DROP TRIGGER processed_messages_outcome_event ON processed_messages;
DROP FUNCTION outcome_event();
DROP TABLE audit_checkpoints;
DROP TABLE audit_findings;
