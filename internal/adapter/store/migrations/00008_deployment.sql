-- +goose Up
-- Settings a deployment must keep from one start to the next, one row per
-- name. key_namespace is EFFECTIVELY_KEY_NAMESPACE as the last worker that
-- started recorded it: a worker configured with another value refuses to
-- start while effects made under the recorded one are open (see
-- store.GuardKeyNamespace). No row means no worker with the guard has
-- started yet: every earlier binary used unscoped keys, the value "".
CREATE TABLE deployment (
    name       text        PRIMARY KEY,
    value      text        NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE deployment;
