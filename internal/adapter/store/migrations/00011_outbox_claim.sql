-- +goose Up
-- The outbox relay claims a batch for a lease in a short transaction and
-- publishes outside it, so no row lock is held while a broker answers; a
-- relay that dies mid-batch leaves its rows to the next one once the lease
-- ran out.
ALTER TABLE outbox ADD COLUMN claimed_until timestamptz;

-- +goose Down
ALTER TABLE outbox DROP COLUMN claimed_until;
