-- +goose Up
-- How many lookups of an ambiguous payment create found nothing: the
-- evidence that nothing was created. Counted apart from the claims, which
-- also count attempts that never reached Stripe (one the shared rate limit
-- sent back to wait, one refused while the worker drains).
ALTER TABLE effects ADD COLUMN unfound integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE effects DROP COLUMN unfound;
