-- +goose Up
-- An operator's resolution of a payment anomaly (starter anomalies
-- resolve): the reason is kept with the row, and a row marked resolved from
-- now on must carry one. Rows resolved by hand before keep their NULL.
ALTER TABLE payment_anomalies ADD COLUMN resolution text;
ALTER TABLE payment_anomalies ADD CONSTRAINT payment_anomalies_resolution_given
    CHECK (resolved_at IS NULL OR btrim(coalesce(resolution, '')) <> '') NOT VALID;

-- +goose Down
ALTER TABLE payment_anomalies DROP CONSTRAINT payment_anomalies_resolution_given;
ALTER TABLE payment_anomalies DROP COLUMN resolution;
