-- +goose Up
-- A dispatcher claims pending rows by a lease instead of holding their row
-- locks across its Temporal starts: claimed_until is when the claim ends.
-- A row is claimable while it is pending and its lease (if any) has passed.
-- The claim is one short transaction, and so is the mark that follows the
-- starts, so a copy's duplicate counter never waits behind a start. A row
-- the dispatcher cannot decode keeps a longer lease (store.DispatchOptions
-- Hold) and stays pending for a worker that can.
ALTER TABLE inbox ADD COLUMN claimed_until timestamptz;

-- +goose Down
ALTER TABLE inbox DROP COLUMN claimed_until;
