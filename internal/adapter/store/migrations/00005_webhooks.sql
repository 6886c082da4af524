-- +goose Up
-- Provider events (Stripe webhooks, SendGrid's Event Webhook) settle the
-- ledger. This migration is correct whether or not 00004 ran before it: it
-- (re)defines the state checks of payments, effects and orders.receipt_status
-- by dropping every CHECK constraint that mentions the column and adding one
-- with the full list, so running after 00004 (which adds processing and
-- unexpected) or without it ends in the same constraint.

-- +goose StatementBegin
DO $$
DECLARE c record;
BEGIN
    FOR c IN
        SELECT rel.relname AS tbl, con.conname AS name
          FROM pg_constraint con JOIN pg_class rel ON rel.oid = con.conrelid
         WHERE con.contype = 'c'
           AND ((rel.relname IN ('payments', 'effects') AND pg_get_constraintdef(con.oid) ~ '\mstate\M')
             OR (rel.relname = 'orders' AND pg_get_constraintdef(con.oid) ~ '\mreceipt_status\M'))
           AND pg_table_is_visible(rel.oid)
    LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', c.tbl, c.name);
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE payments ADD CONSTRAINT payments_state_check
    CHECK (state IN ('claimed', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));
ALTER TABLE effects ADD CONSTRAINT effects_state_check
    CHECK (state IN ('claimed', 'in_flight', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));
-- delivered, bounced and dropped come from SendGrid's events; sent is what
-- the Mail Send API's 202 (or a processed event) says.
ALTER TABLE orders ADD CONSTRAINT orders_receipt_status_check
    CHECK (receipt_status IN ('none', 'sending', 'sent', 'failed', 'unknown', 'delivered', 'bounced', 'dropped'));

-- A provider event that contradicts a final payment state (payment_failed
-- after succeeded, succeeded after failed) is kept here for an operator,
-- never applied: succeeded and failed are final.
CREATE TABLE payment_anomalies (
    event_id          text        PRIMARY KEY,
    event_type        text        NOT NULL,
    payment_intent_id text        NOT NULL,
    consumer          text,
    message_id        text,
    recorded_state    text        NOT NULL,
    reported_status   text        NOT NULL,
    detail            text        NOT NULL DEFAULT '',
    received_at       timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz
);
CREATE INDEX payment_anomalies_open_idx ON payment_anomalies (received_at) WHERE resolved_at IS NULL;

-- charge.refunded events as Stripe reported them: one row per event.
CREATE TABLE stripe_refunds (
    event_id          text        PRIMARY KEY,
    charge_id         text        NOT NULL,
    payment_intent_id text,
    consumer          text,
    message_id        text,
    amount_refunded   bigint      NOT NULL,
    currency          text        NOT NULL,
    refunded          boolean     NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_refunds_pi_idx ON stripe_refunds (payment_intent_id);

-- SendGrid events by the idempotency key the mail carried in custom_args:
-- the receipt ledger reads them (a processed event proves a send whose
-- response was lost).
CREATE TABLE email_events (
    sg_event_id     text        PRIMARY KEY,
    idempotency_key text        NOT NULL,
    event           text        NOT NULL,
    sg_message_id   text        NOT NULL DEFAULT '',
    reason          text        NOT NULL DEFAULT '',
    occurred_at     timestamptz,
    received_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX email_events_key_idx ON email_events (idempotency_key);

-- +goose Down
DROP TABLE email_events;
DROP TABLE stripe_refunds;
DROP TABLE payment_anomalies;
ALTER TABLE orders DROP CONSTRAINT orders_receipt_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_receipt_status_check
    CHECK (receipt_status IN ('none', 'sending', 'sent', 'failed', 'unknown'));
