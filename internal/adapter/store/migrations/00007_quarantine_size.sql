-- +goose Up
-- A message longer than the size limit is not kept whole: the quarantine
-- keeps its first bytes in raw, the SHA-256 of the whole in raw_sha256 (so
-- two different oversized messages stay two rows, and copies of one count
-- in copies), and its length here. For every other row size is the length
-- of raw. Rows written before this migration get that length.
ALTER TABLE quarantine ADD COLUMN size bigint;
UPDATE quarantine SET size = octet_length(raw);

-- +goose Down
ALTER TABLE quarantine DROP COLUMN size;
