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

-- +goose Down
DROP TABLE audit_checkpoints;
DROP TABLE audit_findings;
