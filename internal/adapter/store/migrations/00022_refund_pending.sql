-- +goose Up
-- A refund Stripe answers pending (or requires_action) has not moved money
-- yet: it is recorded pending, its amount still reserved against the
-- payment, and its message's outcome is refund_pending until Stripe says
-- how it ended (the refund workflow's retrieve, or charge.refund.updated).
-- A refund Stripe later reports failed (one that was pending, or one that
-- had succeeded: a card that cannot take it back) becomes failed and gives
-- its amount back. Only forward moves are written: pending to succeeded or
-- failed, succeeded to failed.
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    ALTER TABLE refunds DROP CONSTRAINT refunds_state_check;
    ALTER TABLE refunds ADD CONSTRAINT refunds_state_check
        CHECK (state IN ('claimed', 'pending', 'succeeded', 'failed'));

    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'processed_messages'::regclass AND conname = 'processed_messages_outcome_check';
    ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_outcome_check;
    EXECUTE 'ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_outcome_check '
        || replace(def, 'ARRAY[', 'ARRAY[''refund_pending''::text, ');
END $$;
-- +goose StatementEnd

-- The outcome event of a pending refund is refund.pending; its settlement
-- writes refund.refunded or refund.failed itself (UpdateRefund).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outcome_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    topic text;
    payload jsonb;
BEGIN
    topic := CASE NEW.outcome
        WHEN 'payment_failed'         THEN 'order.payment_failed'
        WHEN 'business_duplicate'     THEN 'order.business_duplicate'
        WHEN 'refunded'               THEN 'refund.refunded'
        WHEN 'refund_pending'         THEN 'refund.pending'
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

-- What the workers' gauges of pending refunds and the pruning of the inbox read.
CREATE INDEX refunds_pending_idx ON refunds (updated_at) WHERE state = 'pending';

-- +goose Down
DROP INDEX refunds_pending_idx;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outcome_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
        RETURN NULL;
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
-- An earlier release would take a pending refund for a refunded one (and send
-- its receipt): going down is refused while any refund is pending.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM refunds WHERE state = 'pending')
       OR EXISTS (SELECT FROM processed_messages WHERE outcome = 'refund_pending') THEN
        RAISE EXCEPTION 'refunds are pending at Stripe: settle them (starter resolve) before going below migration 00022';
    END IF;
END $$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'processed_messages'::regclass AND conname = 'processed_messages_outcome_check';
    ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_outcome_check;
    EXECUTE 'ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_outcome_check '
        || replace(def, '''refund_pending''::text, ', '');
END $$;
-- +goose StatementEnd
ALTER TABLE refunds DROP CONSTRAINT refunds_state_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_state_check CHECK (state IN ('claimed', 'succeeded', 'failed'));
