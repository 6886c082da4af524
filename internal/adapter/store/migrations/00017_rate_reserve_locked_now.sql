-- +goose Up
-- rate_reserve_flow reckons the wait from the time it holds its buckets'
-- locks, not from the time it asked for them. Under 00014 a request that
-- queued behind other workers' reservations was told its slot's distance
-- from before that queueing, so it waited the queueing twice and went
-- late by it (and a worker's view of its line, ratelimit.Lines, ran ahead
-- by as much).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION rate_reserve_flow(p_buckets text[], p_emission float8[], p_burst float8[], p_max_wait float8,
                                  p_flow text, p_share float8, p_express_wait float8)
RETURNS TABLE (wait float8, reserved boolean, express boolean) LANGUAGE plpgsql AS $$
DECLARE
    now_t timestamptz := clock_timestamp();
    w float8;
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
    -- held: a request that queued behind others for them would otherwise
    -- be told to wait that queueing again.
    now_t := clock_timestamp();
    SELECT coalesce(bool_or(f.slot > now_t), false) INTO busy
      FROM rate_flows f WHERE f.bucket = ANY(p_buckets) AND f.flow = p_flow;
    IF NOT busy AND p_share > 0 THEN
        SELECT coalesce(max(extract(epoch FROM greatest(coalesce(r.express_tat, now_t), now_t) - now_t)), 0) INTO w
          FROM rate_limits r WHERE r.bucket = ANY(p_buckets);
        IF w <= p_express_wait THEN
            UPDATE rate_limits r
               SET express_tat = greatest(coalesce(r.express_tat, now_t), now_t) + make_interval(secs => q.e / p_share),
                   tat = greatest(r.tat, now_t) + make_interval(secs => q.e), updated_at = now_t
              FROM unnest(p_buckets, p_emission) AS q(b, e)
             WHERE r.bucket = q.b;
            RETURN QUERY SELECT w, true, true;
            RETURN;
        END IF;
    END IF;
    SELECT coalesce(max(extract(epoch FROM greatest(r.tat, now_t) - now_t) + q.e - q.bu * q.e), 0) INTO w
      FROM rate_limits r JOIN unnest(p_buckets, p_emission, p_burst) AS q(b, e, bu) ON r.bucket = q.b;
    w := greatest(w, 0);
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
-- 00014's function is left: it takes the same arguments and rows, and
-- differs only in when it reads the clock.
