-- +goose Up
-- The last claim up to which no claim of the effect sent anything: every
-- claim from 1 to unsent_through gave its request back unsent (the shared
-- rate limit had no slot in time, its attempt's deadline was too near). A
-- claim right after them is as good as the first: nothing to look up, no
-- earlier send in flight (store.ReleaseEffect).
ALTER TABLE effects ADD COLUMN unsent_through integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE effects DROP COLUMN unsent_through;
