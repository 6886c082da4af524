-- Run by the postgres image on first start of an empty data volume
-- (mounted into /docker-entrypoint-initdb.d by docker-compose.yml).
-- Temporal's auto-setup creates its own "temporal" and "temporal_visibility"
-- databases; this one holds effectively's lasting record.
CREATE DATABASE effectively;
