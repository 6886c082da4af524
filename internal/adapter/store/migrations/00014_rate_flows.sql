-- +goose Up
-- Fairness at the shared rate limits between flows (a route's consumer).
-- A flow with requests reserved ahead (a backlog) waits its turn in the
-- bucket's line, first come first served, up to the request's longest
-- wait. A flow with none reserved ahead takes the express lane: a share of
-- the bucket's rate (express_tat, its own GCRA at emission / share), when
-- its slot there is near. An express slot also pushes the line by one
-- interval, so over time the bucket's rate holds; while a backlog's slots
-- are already reserved ahead, the express lane's share comes on top of
-- them (docs/operations.md: configure the limits under the account's).
-- rate_reserve (00013) stays for workers of the previous release.
ALTER TABLE rate_limits ADD COLUMN express_tat timestamptz;

-- One row per (bucket, flow): slot is when the flow's latest request goes.
-- A flow whose slot is still to come has a backlog at that bucket.
CREATE TABLE rate_flows (
    bucket     text NOT NULL REFERENCES rate_limits (bucket) ON DELETE CASCADE,
    flow       text NOT NULL,
    slot       timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, flow)
);

-- rate_reserve_flow is rate_reserve for a request of p_flow: when p_flow
-- has no slot to come in these buckets and p_share > 0, it takes an express
-- slot if that is at most p_express_wait seconds away; else it takes the
-- line's slots when they are at most p_max_wait away. It returns the wait,
-- whether slots were taken, and whether they were express.
-- +goose StatementBegin
CREATE FUNCTION rate_reserve_flow(p_buckets text[], p_emission float8[], p_burst float8[], p_max_wait float8,
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
DROP FUNCTION rate_reserve_flow(text[], float8[], float8[], float8, text, float8, float8);
DROP TABLE rate_flows;
ALTER TABLE rate_limits DROP COLUMN express_tat;
