-- +goose Up
-- A reservation commits asynchronously: rate_reserve_async is
-- rate_reserve_flow (00014, 00018) with synchronous_commit off for the
-- calling transaction. Every request to a provider locks its buckets' rows
-- (the provider's global row is shared by every route and worker) until its
-- transaction commits, and a synchronous commit holds the lock through a WAL
-- flush: when many requests come at once (a backlog arriving, workers coming
-- back) they queue on the row one flush after another, and a request of a
-- quiet route waits behind the whole queue (docs/operations.md, measured on
-- 2026-12-04). A crash of Postgres can lose the last few hundred
-- milliseconds of reservations (at most 3 × wal_writer_delay): the buckets'
-- lines are then that much shorter than the requests already sent, so the
-- workers may exceed the limit that much once, which the provider's 429s,
-- honoured, bound. No business data is written here. Workers of earlier
-- releases still call rate_reserve_flow, which is unchanged.
-- +goose StatementBegin
CREATE FUNCTION rate_reserve_async(p_buckets text[], p_emission float8[], p_burst float8[], p_max_wait float8,
                                   p_flow text, p_share float8, p_express_wait float8)
RETURNS TABLE (wait float8, reserved boolean, express boolean) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY SELECT * FROM rate_reserve_flow(p_buckets, p_emission, p_burst, p_max_wait, p_flow, p_share, p_express_wait);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION rate_reserve_async(text[], float8[], float8[], float8, text, float8, float8);
