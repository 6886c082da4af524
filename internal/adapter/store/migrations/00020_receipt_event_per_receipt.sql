-- +goose Up
-- A refund receipt's outcome event gets an ID of its own. An order.placed
-- and an order.refund_requested may share a message ID (their ledger keys
-- differ: email:<id>, refundemail:<id>), and both receipts announced
-- receipt.sent:<id>, so the second was dropped by ON CONFLICT (and a relay
-- publishing the ID as Nats-Msg-Id would have deduplicated it anyway). An
-- order's receipt keeps receipt.<state>:<id>; a refund receipt (its ledger
-- row's consumer and message hold a refund) is receipt.<state>:refund:<id>.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION receipt_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    topic text;
    ev_id text;
BEGIN
    IF NEW.kind <> 'email' OR NEW.state NOT IN ('succeeded', 'failed')
       OR (TG_OP = 'UPDATE' AND OLD.state = NEW.state) THEN
        RETURN NULL;
    END IF;
    topic := CASE NEW.state WHEN 'succeeded' THEN 'receipt.sent' ELSE 'receipt.failed' END;
    ev_id := topic || ':' || NEW.message_id;
    IF EXISTS (SELECT 1 FROM refunds r WHERE r.consumer = NEW.consumer AND r.message_id = NEW.message_id) THEN
        ev_id := topic || ':refund:' || NEW.message_id;
    END IF;
    INSERT INTO outbox (event_id, topic, payload)
    VALUES (ev_id, topic, jsonb_strip_nulls(jsonb_build_object('type', topic,
            'consumer', NEW.consumer, 'message_id', NEW.message_id, 'idempotency_key', NEW.key,
            'x_message_id', NEW.provider_ref, 'error', NEW.error)))
    ON CONFLICT (event_id) DO NOTHING;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION receipt_event() RETURNS trigger LANGUAGE plpgsql AS $$
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
