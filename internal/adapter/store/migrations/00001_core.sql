-- +goose Up
-- The order as the business sees it. One row per order ID: the business key.
CREATE TABLE orders (
    id             bigint      PRIMARY KEY CHECK (id > 0),
    status         text        NOT NULL DEFAULT 'pending'
                               CHECK (status IN ('pending', 'paid', 'payment_failed')),
    amount         bigint      NOT NULL CHECK (amount > 0),
    currency       text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    message_id     text        NOT NULL,
    receipt_status text        NOT NULL DEFAULT 'none'
                               CHECK (receipt_status IN ('none', 'sending', 'sent', 'failed', 'unknown')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The one payment an order may have. order_id UNIQUE is the business-key
-- dedup (the seed's technique 2): a second message for the same order cannot
-- claim it, so it never reaches Stripe.
CREATE TABLE payments (
    order_id          bigint      NOT NULL UNIQUE REFERENCES orders (id),
    consumer          text        NOT NULL,
    message_id        text        NOT NULL,
    idempotency_key   text        NOT NULL UNIQUE,
    state             text        NOT NULL DEFAULT 'claimed'
                                  CHECK (state IN ('claimed', 'succeeded', 'failed', 'unknown')),
    amount            bigint      NOT NULL,
    currency          text        NOT NULL,
    payment_intent_id text        UNIQUE,
    charge_id         text,
    failure_code      text,
    decline_code      text,
    failure_message   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- The effect ledger: one row per external effect, keyed by its idempotency
-- key ("payment:evt_91c2", "email:evt_91c2"). Every transition is a
-- compare-and-set on (state, attempt), so a superseded activity attempt can
-- never overwrite the state a newer attempt wrote.
CREATE TABLE effects (
    key            text        PRIMARY KEY,
    kind           text        NOT NULL CHECK (kind IN ('payment', 'email')),
    consumer       text        NOT NULL,
    message_id     text        NOT NULL,
    request_sha256 text        NOT NULL,
    state          text        NOT NULL
                               CHECK (state IN ('claimed', 'in_flight', 'succeeded', 'failed', 'unknown')),
    attempt        integer     NOT NULL CHECK (attempt > 0),
    provider_ref   text,
    result         jsonb,
    error          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX effects_message_idx ON effects (consumer, message_id);

-- The seed's technique 1: a row per handled message, committed in the same
-- transaction as the message's state change (order paid, payment failed, or
-- recognised as a business duplicate).
CREATE TABLE processed_messages (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    outcome      text        NOT NULL
                             CHECK (outcome IN ('paid', 'payment_failed', 'business_duplicate')),
    order_id     bigint,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);

-- The seed's technique 3: every accepted message, keyed by (consumer,
-- message ID); a copy is rejected at the insert. payload_sha256 is the hash of
-- the canonical message, so a different payload under a seen ID is detected.
CREATE TABLE inbox (
    consumer       text        NOT NULL,
    message_id     text        NOT NULL,
    payload        bytea       NOT NULL,
    payload_sha256 text        NOT NULL,
    source         text        NOT NULL,
    state          text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'dispatched')),
    workflow_id    text,
    received_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at  timestamptz,
    duplicates     integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX inbox_pending_idx ON inbox (received_at) WHERE state = 'pending';

-- Messages that could not be processed, kept with their reason: never dropped.
-- The same bytes quarantined again for the same reason are counted in copies
-- rather than stored twice.
CREATE TABLE quarantine (
    id          bigserial   PRIMARY KEY,
    source      text        NOT NULL,
    consumer    text,
    message_id  text,
    raw         bytea       NOT NULL,
    raw_sha256  text        NOT NULL,
    reason      text        NOT NULL,
    detail      text        NOT NULL DEFAULT '',
    copies      integer     NOT NULL DEFAULT 1,
    received_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    retried_at  timestamptz,
    retry_count integer     NOT NULL DEFAULT 0,
    UNIQUE (reason, raw_sha256)
);
CREATE INDEX quarantine_message_idx ON quarantine (message_id);

-- The transactional outbox: events written in the same transaction as the
-- state change they announce, published later by a relay.
CREATE TABLE outbox (
    event_id     text        PRIMARY KEY,
    topic        text        NOT NULL,
    payload      jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished_idx ON outbox (created_at) WHERE published_at IS NULL;

-- +goose Down
DROP TABLE outbox;
DROP TABLE quarantine;
DROP TABLE inbox;
DROP TABLE processed_messages;
DROP TABLE effects;
DROP TABLE payments;
DROP TABLE orders;
