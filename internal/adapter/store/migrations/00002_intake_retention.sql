-- +goose Up
-- Pruning deletes dispatched inbox rows and published outbox rows older than
-- the retention, a batch at a time; these indexes keep each batch from
-- scanning the tables.
CREATE INDEX inbox_dispatched_idx ON inbox (dispatched_at) WHERE state = 'dispatched';
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_published_idx;
DROP INDEX inbox_dispatched_idx;
