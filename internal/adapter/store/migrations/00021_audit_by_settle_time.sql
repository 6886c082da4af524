-- +goose Up
-- The scheduled audit picks what it compares by when it last changed
-- (settled), not only by when it was claimed: a payment still processing, a
-- refund still claimed or a receipt still being retried when the audit
-- passed its slice is compared in the slice in which it settled. These
-- indexes serve the new conditions; payments (state, updated_at) has one
-- already (payments_open_idx).
CREATE INDEX refunds_updated_at_idx ON refunds (updated_at);
CREATE INDEX effects_email_updated_at_idx ON effects (updated_at) WHERE kind = 'email';

-- +goose Down
DROP INDEX effects_email_updated_at_idx;
DROP INDEX refunds_updated_at_idx;
