-- +goose Up
-- Only a succeeded PaymentIntent is a charge. A payment can also be
-- processing (Stripe settles it later: a webhook or a retrieve tells) or
-- unexpected (a status effectively never asks for, such as
-- requires_capture: an operator looks). Both are open states, like
-- unknown; succeeded and failed stay final.
ALTER TABLE payments DROP CONSTRAINT payments_state_check;
ALTER TABLE payments ADD CONSTRAINT payments_state_check
    CHECK (state IN ('claimed', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));
ALTER TABLE effects DROP CONSTRAINT effects_state_check;
ALTER TABLE effects ADD CONSTRAINT effects_state_check
    CHECK (state IN ('claimed', 'in_flight', 'processing', 'succeeded', 'failed', 'unknown', 'unexpected'));

-- The PaymentIntent's last status seen at Stripe, for operators.
ALTER TABLE payments ADD COLUMN stripe_status text;

-- `starter payments --state …` and the open-payments gauge read open rows.
CREATE INDEX payments_open_idx ON payments (state, updated_at)
    WHERE state IN ('claimed', 'processing', 'unknown', 'unexpected');

-- +goose Down
DROP INDEX payments_open_idx;
ALTER TABLE payments DROP COLUMN stripe_status;
UPDATE effects SET state = 'unknown' WHERE state IN ('processing', 'unexpected');
UPDATE payments SET state = 'unknown' WHERE state IN ('processing', 'unexpected');
ALTER TABLE effects DROP CONSTRAINT effects_state_check;
ALTER TABLE effects ADD CONSTRAINT effects_state_check
    CHECK (state IN ('claimed', 'in_flight', 'succeeded', 'failed', 'unknown'));
ALTER TABLE payments DROP CONSTRAINT payments_state_check;
ALTER TABLE payments ADD CONSTRAINT payments_state_check
    CHECK (state IN ('claimed', 'succeeded', 'failed', 'unknown'));
