-- +goose Up
-- The ledger's fencing token is the number of the claim that owns a row,
-- counted by the database, no longer Temporal's activity attempt number: a
-- local activity's attempts start again at 1 when a worker dies, and a
-- local attempt may be followed by a regular activity's attempt 1.
ALTER TABLE effects RENAME COLUMN attempt TO claim;

-- +goose Down
ALTER TABLE effects RENAME COLUMN claim TO attempt;
