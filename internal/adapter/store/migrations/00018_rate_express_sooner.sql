-- +goose Up
-- An express slot is taken only when it comes sooner than the line's.
-- Under 00014 a flow with no slot to come took the express lane whenever
-- its slot there was near, even with the line empty: a flow sending one
-- request at a time at half a bucket's rate (the orders' creates and
-- confirms at Stripe's global limit) then waited for its own express
-- slots, and a quiet flow (the refunds) waited behind them, up to an
-- express interval, where the bucket had room at once. The lane is a way
-- past another flow's backlog, not a second line: it is taken only when
-- the line's wait is longer than one interval of the request's slowest
-- bucket (slots reserved ahead) and the express slot comes sooner.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rate_reserve_flow(p_buckets text[], p_emission float8[], p_burst float8[], p_max_wait float8,
                                  p_flow text, p_share float8, p_express_wait float8)
RETURNS TABLE (wait float8, reserved boolean, express boolean) LANGUAGE plpgsql AS $$
DECLARE
    now_t timestamptz := clock_timestamp();
    w float8;
    xw float8;
    busy boolean;
BEGIN
    INSERT INTO rate_limits (bucket, tat, emission, burst)
    SELECT q.b, now_t, q.e, q.bu FROM unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu)
    ORDER BY q.b
    ON CONFLICT (bucket) DO NOTHING;
    -- Lock the rows in name order: workers never deadlock on them. The
    -- flows' rows are only written under their buckets' locks.
    PERFORM 1 FROM rate_limits WHERE bucket = ANY(p_buckets) ORDER BY bucket FOR UPDATE;
    -- The time the slots are reckoned from is read once the locks are
    -- held (00017).
    now_t := clock_timestamp();
    -- The line's wait.
    SELECT coalesce(max(extract(epoch FROM greatest(r.tat, now_t) - now_t) + q.e - q.bu * q.e), 0) INTO w
      FROM rate_limits r JOIN unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu) ON r.bucket = q.b;
    w := greatest(w, 0);
    -- A line: slots reserved ahead beyond the next interval (a wait of up
    -- to one interval is only the spacing after the last request).
    IF p_share > 0 AND w > (SELECT max(e) FROM unnest(p_emission) AS e) THEN
        SELECT coalesce(bool_or(f.slot > now_t), false) INTO busy
          FROM rate_flows f WHERE f.bucket = ANY(p_buckets) AND f.flow = p_flow;
        IF NOT busy THEN
            SELECT coalesce(max(extract(epoch FROM greatest(coalesce(r.express_tat, now_t), now_t) - now_t)), 0) INTO xw
              FROM rate_limits r WHERE r.bucket = ANY(p_buckets);
            IF xw < w AND xw <= p_express_wait THEN
                UPDATE rate_limits r
                   SET express_tat = greatest(coalesce(r.express_tat, now_t), now_t) + make_interval(secs => q.e / p_share),
                       tat = greatest(r.tat, now_t) + make_interval(secs => q.e), updated_at = now_t
                  FROM unnest(p_buckets, p_emission) AS q(b, e)
                 WHERE r.bucket = q.b;
                RETURN QUERY SELECT xw, true, true;
                RETURN;
            END IF;
        END IF;
    END IF;
    IF w > p_max_wait THEN
        RETURN QUERY SELECT w, false, false;
        RETURN;
    END IF;
    UPDATE rate_limits r
       SET tat = greatest(r.tat, now_t) + make_interval(secs => q.e), emission = q.e, burst = q.bu, updated_at = now_t
      FROM unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu)
     WHERE r.bucket = q.b;
    INSERT INTO rate_flows (bucket, flow, slot, updated_at)
    SELECT b, p_flow, now_t + make_interval(secs => w), now_t FROM unnest(p_buckets) AS b
    ON CONFLICT (bucket, flow) DO UPDATE SET slot = greatest(rate_flows.slot, excluded.slot), updated_at = now_t;
    RETURN QUERY SELECT w, true, false;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- This function is left, as 00017's Down leaves its own: it takes the same
-- arguments and rows (no schema changed), and differs only in when a
-- request takes the express lane.
