-- +goose Up
-- What a payment has refunded so far. The CHECK is the business rule, held
-- by the database: the refunds of one payment never exceed what it charged.
-- A refund is claimed by adding its amount here in the same transaction
-- that inserts its refunds row, with the payment row locked (FOR UPDATE), so
-- two refunds racing for the last of a payment cannot both pass; a failed
-- refund gives its amount back in the transaction that records the failure.
ALTER TABLE payments ADD COLUMN refunded_amount bigint NOT NULL DEFAULT 0;
ALTER TABLE payments ADD CONSTRAINT payments_refunds_within_amount
    CHECK (refunded_amount >= 0 AND refunded_amount <= amount);

-- One row per refund message that got past the rule: its amount counts in
-- payments.refunded_amount while it is claimed or succeeded. A refund the
-- rule refused (refund_exceeds_payment, order_not_paid) has no row here,
-- only its processed_messages row.
CREATE TABLE refunds (
    consumer          text        NOT NULL,
    message_id        text        NOT NULL,
    order_id          bigint      NOT NULL REFERENCES payments (order_id),
    idempotency_key   text        NOT NULL UNIQUE,
    state             text        NOT NULL DEFAULT 'claimed'
                                  CHECK (state IN ('claimed', 'succeeded', 'failed')),
    amount            bigint      NOT NULL CHECK (amount > 0),
    currency          text        NOT NULL,
    reason            text        NOT NULL,
    payment_intent_id text        NOT NULL,
    refund_id         text        UNIQUE,
    refund_status     text,
    failure_code      text,
    failure_message   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX refunds_order_idx ON refunds (order_id);

-- The ledger and processed_messages learn the refund's kind and outcomes.
-- Other migrations may have extended these lists too, so the values are
-- added to whatever the constraint holds, not written out again.
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'effects'::regclass AND conname = 'effects_kind_check';
    ALTER TABLE effects DROP CONSTRAINT effects_kind_check;
    EXECUTE 'ALTER TABLE effects ADD CONSTRAINT effects_kind_check '
        || replace(def, 'ARRAY[', 'ARRAY[''refund''::text, ');

    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'processed_messages'::regclass AND conname = 'processed_messages_outcome_check';
    ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_outcome_check;
    EXECUTE 'ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_outcome_check '
        || replace(def, 'ARRAY[', 'ARRAY[''refunded''::text, ''refund_failed''::text, ''refund_exceeds_payment''::text, ''order_not_paid''::text, ');
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'effects'::regclass AND conname = 'effects_kind_check';
    ALTER TABLE effects DROP CONSTRAINT effects_kind_check;
    EXECUTE 'ALTER TABLE effects ADD CONSTRAINT effects_kind_check '
        || replace(def, '''refund''::text, ', '');

    SELECT pg_get_constraintdef(oid) INTO STRICT def FROM pg_constraint
     WHERE conrelid = 'processed_messages'::regclass AND conname = 'processed_messages_outcome_check';
    ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_outcome_check;
    EXECUTE 'ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_outcome_check '
        || replace(def, '''refunded''::text, ''refund_failed''::text, ''refund_exceeds_payment''::text, ''order_not_paid''::text, ', '');
END $$;
-- +goose StatementEnd
DROP TABLE refunds;
ALTER TABLE payments DROP CONSTRAINT payments_refunds_within_amount;
ALTER TABLE payments DROP COLUMN refunded_amount;
