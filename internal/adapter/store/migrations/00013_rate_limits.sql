-- +goose Up
-- The providers' rate limits, shared by every worker process: one row per
-- bucket (a provider, an endpoint of it). tat is the bucket's theoretical
-- arrival time (GCRA): a request takes the slot at greatest(tat, now) and
-- pushes tat by one emission interval; it goes at tat - burst intervals. A
-- 429 pushes tat past the provider's Retry-After.
CREATE TABLE rate_limits (
    bucket     text PRIMARY KEY,
    tat        timestamptz NOT NULL,
    emission   double precision NOT NULL CHECK (emission > 0),  -- seconds between requests: 1 / rate
    burst      double precision NOT NULL CHECK (burst >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- rate_reserve takes one request's slot in every bucket named, all or none:
-- only when the request would wait at most max_wait seconds. It returns the
-- wait (seconds, from the database's clock) and whether the slots were
-- taken; not taken, the wait is what a request would have waited.
-- +goose StatementBegin
CREATE FUNCTION rate_reserve(p_buckets text[], p_emission float8[], p_burst float8[], p_max_wait float8)
RETURNS TABLE (wait float8, reserved boolean) LANGUAGE plpgsql AS $$
DECLARE
    now_t timestamptz := clock_timestamp();
    w float8;
BEGIN
    INSERT INTO rate_limits (bucket, tat, emission, burst)
    SELECT q.b, now_t, q.e, q.bu FROM unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu)
    ORDER BY q.b
    ON CONFLICT (bucket) DO NOTHING;
    -- Lock the rows in name order: workers never deadlock on them.
    PERFORM 1 FROM rate_limits WHERE bucket = ANY(p_buckets) ORDER BY bucket FOR UPDATE;
    SELECT coalesce(max(extract(epoch FROM greatest(r.tat, now_t) - now_t) + q.e - q.bu * q.e), 0) INTO w
      FROM rate_limits r JOIN unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu) ON r.bucket = q.b;
    w := greatest(w, 0);
    IF w > p_max_wait THEN
        RETURN QUERY SELECT w, false;
        RETURN;
    END IF;
    UPDATE rate_limits r
       SET tat = greatest(r.tat, now_t) + make_interval(secs => q.e), emission = q.e, burst = q.bu, updated_at = now_t
      FROM unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu)
     WHERE r.bucket = q.b;
    RETURN QUERY SELECT w, true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION rate_reserve(text[], float8[], float8[], float8);
DROP TABLE rate_limits;
