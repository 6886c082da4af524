-- +goose Up
-- The providers' rate limits, shared by every worker process: one row per
-- bucket (a provider, an endpoint of it). tat is the bucket's theoretical
-- arrival time (GCRA): a request reserves the slot at greatest(tat, now)
-- and pushes tat by one emission interval; it waits until tat - burst
-- intervals. A 429 pushes tat past the provider's Retry-After.
CREATE TABLE rate_limits (
    bucket     text PRIMARY KEY,
    tat        timestamptz NOT NULL,
    emission   double precision NOT NULL CHECK (emission > 0),  -- seconds between requests: 1 / rate
    burst      double precision NOT NULL CHECK (burst >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE rate_limits;
